"""The build step drives buildctl, signs the pushed digest with cosign, and outputs only signed digests."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from steps import build_image

DIGEST = "sha256:" + "ab" * 32
SERVE_DIGEST = "sha256:" + "5e" * 32
COMMIT = "3f2c1b0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins for buildctl and cosign that record their arguments (no daemon, no registry)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "calls.txt"
    # buildctl writes the metadata file BuildKit writes after a push (the serve image gets its own digest).
    _tool(bin_dir, "buildctl", f'echo "buildctl $*" >> {record}\n'
          f'case "$*" in *images/serve/*) d={SERVE_DIGEST};; *) d={DIGEST};; esac\n'
          f'while [ "$1" != "--metadata-file" ]; do shift; done\n'
          'echo "{\\"containerimage.digest\\": \\"$d\\"}" > "$2"\n')  # fmt: skip
    _tool(bin_dir, "cosign", f'echo "cosign $*" >> {record}\nexit ${{COSIGN_EXIT:-0}}\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("BUILDKIT_HOST", "tcp://buildkitd.ml-build.svc:1234")
    return record


def _args(tmp_path: Path) -> list[str]:
    return ["--env", "local", "--git-sha", COMMIT, "--git-repo", "https://git.example.com/ml/p.git",
            "--image", "registry.example.com/paddle-mlops/train",
            "--serve-image", "registry.example.com/paddle-mlops/serve", "--outputs-dir", str(tmp_path)]  # fmt: skip


def test_builds_the_commit_signs_the_digest_and_outputs_it(tools: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COSIGN_PRIVATE_KEY", "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    monkeypatch.setenv("BUILDKIT_TLS_DIR", "/etc/buildkit/certs")
    assert build_image.main(_args(tmp_path)) == 0
    build, sign, build_serve, sign_serve = tools.read_text().splitlines()
    assert "--tlscacert=/etc/buildkit/certs/ca.crt --tlscert=/etc/buildkit/certs/tls.crt" in build
    assert f"context=https://git.example.com/ml/p.git#{COMMIT}" in build
    assert f"name=registry.example.com/paddle-mlops/train:{COMMIT},push=true" in build
    assert "filename=images/train/Dockerfile" in build
    assert sign.startswith("cosign sign --yes") and "--key env://COSIGN_PRIVATE_KEY" in sign
    assert sign.endswith(f"registry.example.com/paddle-mlops/train@{DIGEST}")
    assert (tmp_path / "image-digest").read_text() == DIGEST
    # The serving image: the same commit and daemon, its own Dockerfile, signed and output by its own digest.
    assert f"context=https://git.example.com/ml/p.git#{COMMIT}" in build_serve
    assert "filename=images/serve/Dockerfile" in build_serve
    assert f"name=registry.example.com/paddle-mlops/serve:{COMMIT},push=true" in build_serve
    assert sign_serve.endswith(f"registry.example.com/paddle-mlops/serve@{SERVE_DIGEST}")
    assert (tmp_path / "serve-image-digest").read_text() == SERVE_DIGEST


def test_a_failed_signature_outputs_no_digest(tools: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COSIGN_PRIVATE_KEY", "key")
    monkeypatch.setenv("COSIGN_EXIT", "1")
    assert build_image.main(_args(tmp_path)) == 1
    assert not (tmp_path / "image-digest").exists() and not (tmp_path / "serve-image-digest").exists()


def test_without_a_key_the_image_is_pushed_unsigned_with_a_warning(
    tools: Path, tmp_path: Path, monkeypatch, caplog
) -> None:
    monkeypatch.delenv("COSIGN_PRIVATE_KEY", raising=False)
    assert build_image.main(_args(tmp_path)) == 0
    assert "cosign" not in tools.read_text()
    assert "is not signed" in caplog.text


def test_locally_the_build_is_skipped_and_says_why(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no buildctl anywhere
    monkeypatch.delenv("BUILDKIT_HOST", raising=False)
    assert build_image.main(_args(tmp_path)) == 0
    assert "skipped — no BuildKit here" in capsys.readouterr().out
    assert (tmp_path / "image-digest").read_text() == (tmp_path / "serve-image-digest").read_text() == "local"
