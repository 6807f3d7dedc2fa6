"""The predictor's thread count follows the container's CPU quota (cgroup v2 and v1 trees written by the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddle_mlops_core.config import ConfigError, load_config, load_regions
from steps.runtime.release.inference_service import build_inference_service
from steps.runtime.serving import cpu_quota


@pytest.fixture(autouse=True)
def many_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A big node: 64 CPUs in the affinity mask, so only the quota limits the count."""
    monkeypatch.setattr(cpu_quota, "affinity_cpus", lambda: 64)


def v2_tree(root: Path, own: str, limits: dict[str, str]) -> Path:
    """A unified hierarchy at `root`: `cpu.max` per cgroup path, this process in `own`."""
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for path, value in limits.items():
        directory = root / path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.max").write_text(value + "\n")
    (root / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    proc = root.parent / "proc-self-cgroup"
    proc.write_text(f"0::{own}\n")
    return proc


def v1_tree(root: Path, own: str, quota: int, period: int = 100_000) -> Path:
    directory = root / "cpu,cpuacct" / own.lstrip("/")
    directory.mkdir(parents=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period}\n")
    proc = root.parent / "proc-self-cgroup"
    proc.write_text(f"12:memory:{own}\n4:cpu,cpuacct:{own}\n1:name=systemd:{own}\n")
    return proc


def test_a_v2_container_quota_gives_its_whole_cores(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = v2_tree(root, "/", {"/": "250000 100000"})  # a namespaced mount: the container is the root
    assert cpu_quota.cpu_quota(root, proc) == pytest.approx(2.5)
    assert cpu_quota.default_threads(root, proc) == 2


def test_the_tightest_limit_on_the_way_up_wins(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    pod = "/kubepods.slice/kubepods-pod1.slice"
    proc = v2_tree(
        root, f"{pod}/cri-containerd-abc.scope", {pod: "400000 100000", f"{pod}/cri-containerd-abc.scope": "max 100000"}
    )
    assert cpu_quota.default_threads(root, proc) == 4


def test_no_limit_means_the_affinity_mask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cgroup"
    proc = v2_tree(root, "/", {"/": "max 100000"})
    assert cpu_quota.cpu_quota(root, proc) is None
    assert cpu_quota.default_threads(root, proc) == 64
    monkeypatch.setattr(cpu_quota, "affinity_cpus", lambda: 3)  # taskset / the static CPU manager's cores
    assert cpu_quota.default_threads(root, proc) == 3


def test_a_fraction_of_a_core_still_gets_one_thread(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = v2_tree(root, "/", {"/": "50000 100000"})
    assert cpu_quota.default_threads(root, proc) == 1


def test_cgroup_v1_quota_and_period(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = v1_tree(root, "/kubepods/burstable/pod1/abc", quota=300_000)
    assert cpu_quota.default_threads(root, proc) == 3
    unlimited = tmp_path / "unlimited" / "cgroup"
    assert cpu_quota.default_threads(unlimited, v1_tree(unlimited, "/", quota=-1)) == 64


def test_no_cgroup_filesystem_means_the_affinity_mask(tmp_path: Path) -> None:
    assert cpu_quota.default_threads(tmp_path / "absent", tmp_path / "absent-proc") == 64


def test_the_inference_service_reserves_what_the_predictor_sizes_itself_to(tmp_path: Path) -> None:
    """Request = limit = serving.cpus; in a pod with that quota the predictor runs exactly that many threads."""
    cfg = load_config(env="prod", overrides=["serving.cpus=3"])
    region = load_regions()[cfg.cluster.region]
    isvc = build_inference_service(cfg, region, "s3://m/e/1", "registry.example.com/serve@sha256:" + "a" * 64, "1")
    (container,) = isvc["spec"]["predictor"]["containers"]
    resources = container["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "3"
    root = tmp_path / "cgroup"
    proc = v2_tree(root, "/", {"/": f"{int(resources['limits']['cpu']) * 100_000} 100000"})
    assert cfg.serving.cpu_threads is None
    assert cpu_quota.default_threads(root, proc) == 3


def test_more_threads_than_the_pod_may_use_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(env="prod", overrides=["serving.cpus=2", "serving.cpu_threads=4"])
    assert "serving.cpu_threads 4 is more than serving.cpus 2" in str(error.value)
    assert load_config(env="local", overrides=["serving.cpu_threads=4"]).serving.cpu_threads == 4  # no pod locally
