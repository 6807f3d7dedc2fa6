"""argo/ is exactly what the pipelines compile to, and drift is reported by file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from paddle_mlops import compile as compiler
from paddle_mlops_core.config import load_config

ARGO = Path(__file__).resolve().parents[1] / "argo"


@pytest.fixture(scope="module")
def cfg():
    return compiler.default_compile_config()


def test_checked_in_argo_is_current(cfg) -> None:
    assert compiler.check(ARGO, cfg) == []


def test_one_file_per_template(cfg) -> None:
    rendered = compiler.render_all(cfg)
    templates = {name for name in compiler.PIPELINES}
    assert templates == {
        "rollout.yaml",
        "image-rollout.yaml",
        "scheduled-retrain.yaml",
        "train-deploy.yaml",
        "finetune-batch.yaml",
    }
    for name in templates:
        assert [d["metadata"]["name"] for d in rendered[name]] == [name.removesuffix(".yaml")]
    assert {"events.yaml", "tenancy.yaml", "rbac.yaml", "monitoring.yaml", "dashboards.yaml"} <= set(rendered)


def test_kustomization_lists_every_generated_file(cfg) -> None:
    """Every generated file but the controller settings, which a client-side `kubectl apply -k` must not touch: they
    are patched into upstream objects (pipelines/platform/controller_settings.py; tests/test_controller_settings.py)."""
    kustomization = yaml.safe_load((ARGO / "kustomization.yaml").read_text(encoding="utf-8"))
    files = set(compiler.render_all(cfg))
    settings = {f for f in files if f.startswith("controller-settings/")}
    assert settings and files - settings <= set(kustomization["resources"])
    assert not any(str(r).startswith("controller-settings") for r in kustomization["resources"])
    for resource in kustomization["resources"]:
        assert (ARGO / resource).exists(), resource


def test_write_then_check_round_trips(tmp_path: Path, cfg) -> None:
    written = compiler.write(tmp_path, cfg)
    assert {p.relative_to(tmp_path).as_posix() for p in written} == set(compiler.render_all(cfg))
    assert all(p.read_text(encoding="utf-8").startswith(compiler.HEADER) for p in written)
    assert compiler.check(tmp_path, cfg) == []


def test_formatting_alone_is_not_drift(tmp_path: Path, cfg) -> None:
    compiler.write(tmp_path, cfg)
    path = tmp_path / "rollout.yaml"
    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    path.write_text(compiler.HEADER + yaml.safe_dump_all(docs, sort_keys=True, indent=4), encoding="utf-8")
    assert compiler.check(tmp_path, cfg) == []


def test_changed_pipeline_value_is_reported_by_file(tmp_path: Path, cfg) -> None:
    compiler.write(tmp_path, cfg)
    changed = load_config(overrides=["storage.workspace=s3://elsewhere/runs"])
    problems = compiler.check(tmp_path, changed)
    stale = [p for p in problems if "stale" in p]
    assert any(str(tmp_path / "train-deploy.yaml") in p for p in stale)
    # the diff shows the new value: the templates' workspace, the log archive's bucket (argo/tenancy.yaml)
    assert all("s3://elsewhere/runs" in p or "bucket: elsewhere" in p for p in stale)
    assert any(str(tmp_path / "tenancy.yaml") in p and "bucket: elsewhere" in p for p in stale)


def test_edited_file_is_reported_with_a_diff(tmp_path: Path, cfg) -> None:
    compiler.write(tmp_path, cfg)
    path = tmp_path / "train-deploy.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("value: '[]'", "value: '[\"training.epochs=1\"]'"))
    (problem,) = compiler.check(tmp_path, cfg)
    assert problem.startswith(f"{path}: stale")
    lines = problem.splitlines()
    assert any(line.startswith("-") and "training.epochs=1" in line for line in lines)
    assert any(line.startswith("+") and "value: '[]'" in line for line in lines)


def test_missing_and_leftover_files_are_reported(tmp_path: Path, cfg) -> None:
    shutil.copytree(ARGO, tmp_path / "argo")
    out = tmp_path / "argo"
    (out / "rollout.yaml").unlink()
    (out / "old-pipeline.yaml").write_text(compiler.HEADER + "kind: WorkflowTemplate\n", encoding="utf-8")
    (out / "extra-notes.yaml").write_text("kind: ServiceAccount\n", encoding="utf-8")  # hand-written: not ours
    problems = compiler.check(out, cfg)
    assert len(problems) == 2
    assert any("rollout.yaml: missing" in p for p in problems)
    assert any("old-pipeline.yaml" in p and "no longer produced" in p for p in problems)


def test_worker_sets_are_written_checked_and_reported_once_multikueue_is_off(tmp_path: Path) -> None:
    """cluster.multikueue adds argo/workers/<region>.yaml; compile --check covers them, and flags them as leftovers
    when the configuration turns MultiKueue off again."""
    multi = load_config(overrides=["cluster.multikueue=true"])
    compiler.write(tmp_path, multi)
    assert sorted(p.name for p in (tmp_path / "workers").glob("*.yaml")) == ["cn-east.yaml", "cn-north.yaml"]
    assert compiler.check(tmp_path, multi) == []
    (tmp_path / "workers" / "cn-east.yaml").write_text(compiler.HEADER + "kind: Namespace\n", encoding="utf-8")
    (stale,) = compiler.check(tmp_path, multi)
    assert "workers/cn-east.yaml: stale" in stale
    compiler.write(tmp_path, multi)
    leftovers = compiler.check(tmp_path, load_config())
    assert sum("no longer produced" in p for p in leftovers) == 2 and all(
        "workers/" in p for p in leftovers if "no longer" in p
    )
