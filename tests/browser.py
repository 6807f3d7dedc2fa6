"""Headless Chromium against `paddle-mlops ui` (MLflow's own UI over the run's store), for the UI tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from steps.runtime.serving.processes import stop_group

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in CI containers
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no network here: keep Chromium from trying
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def require_browser() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
    pytest.skip("chromium is not installed (apt-get install chromium); CI=true makes this a failure")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium(browser: str, profile: Path, *args: str) -> str:
    """Run headless Chromium with a profile of its own; its stdout (`--dump-dom`'s page)."""
    out = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--window-size=1400,1400",
            "--virtual-time-budget=20000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return out.stdout


@contextmanager
def mlflow_ui(workdir: Path, printed: Path) -> Iterator[str]:
    """`paddle-mlops ui --workdir WORKDIR` on a free port until the block ends; its base URL. What it prints goes to
    `printed`."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "paddle_mlops.cli", "ui", "--workdir", str(workdir), "--port", str(port)],
        cwd=PROJECT_ROOT,
        stdout=printed.open("w"),
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # mlflow ui forks workers: stop the whole group
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, "paddle-mlops ui exited early"
            assert time.monotonic() < deadline, "MLflow UI did not become healthy"
            time.sleep(1)
        yield base
    finally:
        stop_group(server, 20)


def keep_screenshot(shot: Path, name: str) -> None:
    """Assert `shot` is a real PNG; copy it to $PADDLE_MLOPS_SCREENSHOT_DIR/<name> when set (how docs/img/ is
    refreshed: `PADDLE_MLOPS_SCREENSHOT_DIR=docs/img .venv/bin/pytest tests/test_mlflow_ui.py tests/test_e2e.py`)."""
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep = os.environ.get("PADDLE_MLOPS_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / name)
