"""scripts/sign-images.sh signs every image the pipeline does not build, by digest, exactly as the build
step signs the images it builds; run against stand-in `cosign` and `crane` that record their calls."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_mlops.compile import default_compile_config, render_all
from pipelines.platform import kyverno
from steps import build_image

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sign-images.sh"

COSIGN = """#!/bin/sh
if [ "$1" = version ]; then printf 'GitVersion:    %s\\n' "${STUB_COSIGN_VERSION:-v2.4.1}"; exit 0; fi
printf '%s\\n' "$*" >> "$STUB_LOG.cosign"
"""
CRANE = """#!/bin/sh
printf '%s\\n' "$*" >> "$STUB_LOG.crane"
[ "$1" = digest ] || exit 9
[ -z "$STUB_CRANE_FAIL" ] || { echo "MANIFEST_UNKNOWN" >&2; exit 1; }
printf 'sha256:%s\\n' "$(printf '%s' "$2" | sha256sum | cut -c1-64)"
"""


def fake_digest(reference: str) -> str:
    """What the stand-in `crane digest` answers for `reference`."""
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


def repository(reference: str) -> str:
    name = reference.rsplit("/", 1)[-1]
    return reference.rsplit(":", 1)[0] if ":" in name else reference


@pytest.fixture()
def stubs(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("cosign", COSIGN), ("crane", CRANE)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def run(stubs: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(stubs / "calls"),
        "COSIGN_PRIVATE_KEY": "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----stand-in",
        "COSIGN_PASSWORD": "stand-in",
        "PYTHON": sys.executable,
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True, timeout=120)


def calls(stubs: Path, tool: str) -> list[list[str]]:
    log = stubs / f"calls.{tool}"
    return [line.split(" ") for line in log.read_text().splitlines()] if log.exists() else []


def build_step_flags(stubs: Path, reference: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The build step's own cosign arguments for `reference` (its cosign found on the same PATH)."""
    monkeypatch.setenv("COSIGN_PRIVATE_KEY", "stand-in")
    monkeypatch.setenv("PATH", f"{stubs}{os.pathsep}{os.environ['PATH']}")
    command = build_image.sign_command(reference)
    assert command is not None and Path(command[0]).name == "cosign"
    return command[1:]


def test_signs_every_release_image_by_digest_with_the_build_steps_flags(stubs, monkeypatch):
    result = run(stubs)
    assert result.returncode == 0, result.stderr
    images = kyverno.release_images(default_compile_config())
    expected = [f"{repository(image)}@{fake_digest(image)}" for image in images]
    assert calls(stubs, "crane") == [["digest", image] for image in images]
    assert calls(stubs, "cosign") == [build_step_flags(stubs, ref, monkeypatch) for ref in expected]
    assert result.stdout.split() == [word for ref in expected for word in ("signed", ref)]


def test_release_images_cover_every_project_image_the_install_set_runs():
    """Each image from our registry that a manifest names (and the serve image rollout creates pods
    with) is either built and signed per run (the train digest, a template) or signed at release."""
    cfg = default_compile_config()
    named: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            image = node.get("image")
            if isinstance(image, str) and image.startswith(f"{cfg.images.registry}/") and "{{" not in image:
                named.add(image)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(render_all(cfg))
    assert named, "the install set names project images"
    assert named | {cfg.images.serve} <= set(kyverno.release_images(cfg))
    assert cfg.images.buildkit not in kyverno.release_images(cfg)  # upstream's, outside the policy


def test_an_image_given_by_digest_is_signed_as_is(stubs, monkeypatch):
    pinned = "registry.example.com:5000/paddle-mlops/tools@sha256:" + "a" * 64
    tagged = "registry.example.com:5000/paddle-mlops/serve:1.2.3"
    result = run(stubs, pinned, tagged)
    assert result.returncode == 0, result.stderr
    assert calls(stubs, "crane") == [["digest", tagged]]
    assert [c[-1] for c in calls(stubs, "cosign")] == [
        pinned,
        f"registry.example.com:5000/paddle-mlops/serve@{fake_digest(tagged)}",
    ]


def test_no_key_signs_nothing_and_says_what_to_set(stubs):
    result = run(stubs, COSIGN_PRIVATE_KEY="")
    assert result.returncode == 1
    assert "COSIGN_PRIVATE_KEY" in result.stderr
    assert calls(stubs, "cosign") == []


def test_cosign_v3_is_refused(stubs):
    """cosign v3 refuses --tlog-upload=false and writes bundles a Kyverno `Cosign` verifyImages does not read."""
    result = run(stubs, STUB_COSIGN_VERSION="v3.0.2")
    assert result.returncode == 1
    assert "v2" in result.stderr
    assert calls(stubs, "cosign") == []


def test_an_unresolvable_tag_stops_before_signing(stubs):
    result = run(stubs, "registry.example.com/paddle-mlops/serve:9.9.9", STUB_CRANE_FAIL="1")
    assert result.returncode != 0
    assert "crane could not resolve registry.example.com/paddle-mlops/serve:9.9.9" in result.stderr
    assert calls(stubs, "cosign") == []


def test_usage(stubs):
    assert "Usage: scripts/sign-images.sh" in run(stubs, "--help").stdout
    result = run(stubs, "--bogus")
    assert result.returncode == 2 and "--help" in result.stderr


def test_overlay_gets_the_digest_of_every_image_the_install_set_runs_by_tag(stubs, tmp_path, monkeypatch):
    """--overlay: after signing, the release pins the digests crane resolved into the overlay's images:, upstream's
    BuildKit included (resolved, not signed); rendered, no pod of the install set runs a tag."""
    import shutil

    import yaml

    from paddle_mlops import release_overlay

    overlay = tmp_path / "overlays" / "prod"
    shutil.copytree(ROOT / "overlays" / "prod", overlay)
    result = run(stubs, "--overlay", str(overlay))
    assert result.returncode == 0, result.stderr
    tagged = release_overlay.tagged_images(d for ds in render_all(default_compile_config()).values() for d in ds)
    pinned = release_overlay.pins(yaml.safe_load((overlay / "kustomization.yaml").read_text()))
    assert pinned == {repository(image): fake_digest(image) for image in tagged}
    signed = {c[-1] for c in calls(stubs, "cosign")}
    assert f"moby/buildkit@{fake_digest(default_compile_config().images.buildkit)}" not in signed
    assert run(stubs, "--overlay", str(tmp_path / "nowhere")).returncode == 2
