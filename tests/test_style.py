"""The code base stays lint-clean (ruff, configured in pyproject.toml), like the CI users rely on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_layers_do_not_mix() -> None:
    """pipelines/ never imports paddle; steps/ never imports hera (the three-layer rule)."""
    offenders = []
    for folder, banned in (("pipelines", ("import paddle", "from paddle")), ("steps", ("import hera", "from hera"))):
        for path in (ROOT / folder).rglob("*.py"):
            for line in path.read_text(encoding="utf-8").splitlines():
                stripped = line.strip()
                if any(stripped.startswith(b + " ") or stripped.startswith(b + ".") for b in banned):
                    offenders.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert offenders == []
