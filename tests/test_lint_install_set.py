"""The manifests this project ships pass `paddle-mlops lint` (argo/ and the platform install set) and
checkov."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paddle_mlops.lint import lint_documents, lint_paths, pods_of

ROOT = Path(__file__).resolve().parents[1]


def test_generated_argo_manifests_are_clean(tmp_path):
    argo = ROOT / "argo"
    if not any(argo.glob("*.yaml")):
        compile_ = pytest.importorskip("paddle_mlops.compile")
        compile_.write(tmp_path, compile_.default_compile_config())
        argo = tmp_path
    assert (
        sum(
            1
            for path in argo.glob("*.yaml")
            for doc in yaml.safe_load_all(path.read_text())
            if doc
            for _ in pods_of(doc)
        )
        > 5
    )
    assert lint_paths([argo]) == []


def test_platform_install_set_is_clean():
    from paddle_mlops_core.config import load_config
    from pipelines.platform import render_platform

    for name, docs in render_platform(load_config()).items():
        assert lint_documents(docs, name) == []


def test_checkov_on_argo():
    # checkov is a dev dependency: it sits beside this interpreter in the project's venv.
    checkov = Path(sys.executable).parent / "checkov"
    assert checkov.is_file(), "checkov is missing: run `make test` (it installs the dev extras)"
    result = subprocess.run(
        [
            str(checkov),
            "-d",
            "argo/",
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "--config-file",
            ".checkov.yaml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
