"""The suite keeps to its own stores: a slice of it, run from the checkout as `make test` runs it, leaves the
checkout's `.paddle-mlops/` (the user's MLflow database, object store, serving records) and `mlruns/` as they were.

The slice holds a test whose module-scoped fixture trains with no store configured (tests/test_engine_selection.py
`trained`), which before tests/conftest.py's session-wide home wrote a run into the user's `.paddle-mlops/mlflow.db`,
and the evaluate tests, which log artifacts (MLflow's default artifact root is `./mlruns` of the working directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_mlops_core.contracts import ARTIFACTS_DIR, DEFAULT_HOME, HOME_ENV, TRACKING_URI_ENV
from tests.conftest import PROJECT_ROOT

SLICE = (
    "tests/test_engine_selection.py::test_a_gpu_configuration_on_a_cpu_node_names_the_missing_device",
    "tests/test_evaluate.py::test_gate_passes_threshold_without_champion",
)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under the checkout's stores: relative path -> (size, mtime in ns)."""
    found = {}
    for top in (root / DEFAULT_HOME, root / ARTIFACTS_DIR):
        for path in sorted(top.rglob("*")) if top.is_dir() else []:
            if path.is_file():
                stat = path.stat()
                found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.mark.slow
def test_a_slice_of_the_suite_leaves_the_checkouts_stores_as_they_were() -> None:
    before = snapshot(PROJECT_ROOT)
    # The user's shell, not this test's: no store variables, so only the suite's own fixtures keep it off the checkout.
    env = {k: v for k, v in os.environ.items() if k not in (HOME_ENV, TRACKING_URI_ENV)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SLICE],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{len(SLICE)} passed" in done.stdout
    assert snapshot(PROJECT_ROOT) == before
