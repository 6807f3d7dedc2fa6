"""The rootless BuildKit daemon (argo/buildkit.yaml) with the settings rootlesskit and buildkitd need to
start and build, as upstream runs them.

Encoded from moby/buildkit v0.32.2:
- `examples/kubernetes/deployment+service.rootless.yaml`: seccomp and AppArmor `Unconfined`, uid and gid
  1000, `--oci-worker-no-process-sandbox`, and neither `allowPrivilegeEscalation: false` nor dropped
  capabilities: rootlesskit maps the user namespace with the setuid-root `newuidmap`/`newgidmap`, which
  fail with "newuidmap: Could not set caps" under no_new_privs or without CAP_SETUID/CAP_SETGID in the
  bounding set (moby/buildkit#1671, #3217, #3897);
- `Dockerfile`, stage `rootless` (lines 491-508): user 1000 with /etc/subuid and /etc/subgid ranges for
  it, `XDG_RUNTIME_DIR=/run/user/1000`, `TMPDIR=/home/user/.local/tmp`, state in
  /home/user/.local/share/buildkit; rootlesskit makes its state dir under TMPDIR
  (rootless-containers/rootlesskit `cmd/rootlesskit/main.go`, `os.MkdirTemp("", "rootlesskit")`) and
  buildkitd its temporary mounts there (`snapshot/localmounter_linux.go` line 57);
- `docs/rootless.md` lines 86-105: `--oci-worker-no-process-sandbox`, since Kubernetes has no
  `systempaths=unconfined`.
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

import pytest

from paddle_mlops.compile import default_compile_config
from pipelines.platform import buildkit

IMAGE_UID = 1000
IMAGE_ENV = {"HOME": "/home/user", "XDG_RUNTIME_DIR": "/run/user/1000", "TMPDIR": "/home/user/.local/tmp"}
STATE_DIR = "/home/user/.local/share/buildkit"
# The settings of upstream's rootless example that this check looks at.
UPSTREAM_EXAMPLE = {
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "buildkitd",
                        "args": ["--addr", "tcp://0.0.0.0:1234", "--oci-worker-no-process-sandbox"],
                        "securityContext": {
                            "seccompProfile": {"type": "Unconfined"},
                            "appArmorProfile": {"type": "Unconfined"},
                            "runAsUser": 1000,
                            "runAsGroup": 1000,
                        },
                        "volumeMounts": [
                            {"name": "certs", "readOnly": True, "mountPath": "/certs"},
                            {"name": "buildkitd", "mountPath": STATE_DIR},
                        ],
                    }
                ]
            }
        }
    }
}


def _under(path: str, mount: str) -> bool:
    return posixpath.commonpath([path, mount]) == mount


def rootless_problems(deployment: dict[str, Any]) -> list[str]:
    """Why rootlesskit or buildkitd would not start (or not build) with this Deployment."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == buildkit.NAME]
    # Container fields override the pod's where both exist (runAsUser, runAsGroup, profiles).
    sc = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    problems = []
    if sc.get("allowPrivilegeEscalation") is False:
        problems.append("allowPrivilegeEscalation: false sets no_new_privs: setuid newuidmap/newgidmap cannot map")
    dropped = set((sc.get("capabilities") or {}).get("drop", []))
    if "ALL" in dropped or {"SETUID", "SETGID"} & dropped:
        problems.append("CAP_SETUID/CAP_SETGID dropped from the bounding set: newuidmap cannot set caps")
    if sc.get("privileged"):
        problems.append("privileged: rootless BuildKit does not need it")
    if sc.get("runAsUser") != IMAGE_UID or sc.get("runAsGroup", IMAGE_UID) != IMAGE_UID:
        problems.append(f"not uid/gid {IMAGE_UID}: the image's subuid/subgid ranges belong to {IMAGE_UID}")
    for profile in ("seccompProfile", "appArmorProfile"):
        if (sc.get(profile) or {}).get("type") != "Unconfined":
            problems.append(f"{profile} is not Unconfined: user namespaces and mounts are refused")
    if "--oci-worker-no-process-sandbox" not in container.get("args", []):
        problems.append("no --oci-worker-no-process-sandbox: Kubernetes cannot unmask /proc for the sandbox")
    if sc.get("readOnlyRootFilesystem"):
        env = {**IMAGE_ENV, **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e}}
        writable = [m["mountPath"] for m in container.get("volumeMounts", []) if not m.get("readOnly")]
        for what, path in (
            ("TMPDIR", env["TMPDIR"]),
            ("XDG_RUNTIME_DIR", env["XDG_RUNTIME_DIR"]),
            ("state", STATE_DIR),
        ):
            if not any(_under(path, mount) for mount in writable):
                problems.append(f"{what} {path} is on the read-only root filesystem")
    return problems


@pytest.fixture(scope="module")
def daemon() -> dict[str, Any]:
    (doc,) = [d for d in buildkit.render(default_compile_config()) if d["kind"] == "Deployment"]
    return doc


def test_the_daemon_starts_as_upstream_runs_it(daemon):
    assert rootless_problems(daemon) == []


def test_the_check_agrees_with_upstreams_example():
    assert rootless_problems(UPSTREAM_EXAMPLE) == []


def test_the_check_catches_the_settings_that_stopped_the_daemon(daemon):
    """The restricted-style hardening and a /tmp-only scratch volume (the manifests before issue #15)."""
    old = copy.deepcopy(daemon)
    (container,) = old["spec"]["template"]["spec"]["containers"]
    container["securityContext"].update(allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]})
    container.pop("env", None)
    for mount in container["volumeMounts"]:
        if mount["mountPath"] == buildkit.TMPDIR:
            mount["mountPath"] = "/tmp"
    problems = rootless_problems(old)
    assert any("no_new_privs" in p for p in problems)
    assert any("bounding set" in p for p in problems)
    assert any(p.startswith("TMPDIR /home/user/.local/tmp") for p in problems)


def test_the_exemption_annotation_names_what_is_relaxed(daemon):
    reason = daemon["spec"]["template"]["metadata"]["annotations"]["paddle-mlops/pod-security-exempt"]
    for relaxed in ("seccomp", "AppArmor", "privilege escalation", "capabilities"):
        assert relaxed in reason
    skipped = {value.split("=", 1)[0] for key, value in daemon["metadata"]["annotations"].items() if "checkov" in key}
    assert skipped == {"CKV_K8S_31", "CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37"}
