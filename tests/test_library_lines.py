"""The libraries' own chatter stays in each step's step.log; the terminal shows our lines (paddle_mlops/local/
library_lines.py). The sample lines are copied from a default `make run`'s terminal before this change."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from paddle_mlops.local.executor import LocalExecutor, RunOptions
from paddle_mlops.local.library_lines import LIBRARY_LINES, library_of
from paddle_mlops_core.config import load_config

LIBRARY = {
    "paddle-launch": "LAUNCH INFO 2026-12-04 16:26:19,795 nproc_per_node: 2",
    "paddle-flags": "======================= Modified FLAGS detected =======================",
    "paddle-flags ": "FLAGS(name='FLAGS_enable_pir_in_executor', current_value=True, default_value=False)",
    "paddle-flags  ": "=======================================================================",
    "paddlenlp": "\x1b[32m[2026-12-04 16:29:58,544] [    INFO]\x1b[0m - tokenizer config file saved in /t.json\x1b[0m",
    "paddle2onnx": "[Paddle2ONNX] Use opset_version = 17 for ONNX export.",
    "onnxruntime-quantization": "2026-12-04 16:30:06,086 WARNING Please consider to run pre-processing before "
    "quantization. Refer to example: https://github.com/microsoft/onnxruntime-inference-examples/blob/main/x",
    "httpx": '2026-12-04 16:31:19,272 INFO HTTP Request: POST http://127.0.0.1:42273/v1/models/e:predict "HTTP/1.1 '
    '200 OK"',
    "mlflow": "2026/12/04 16:26:30 INFO mlflow.store.db.utils: Creating initial MLflow database tables...",
    "alembic": "INFO  [alembic.runtime.migration] Running upgrade  -> 451aebb31d03, add metric step",
}
OURS = [
    "launch: /usr/bin/python -m paddle.distributed.launch --nproc_per_node 2 steps/train.py",
    "2026-12-04 16:28:24,372 INFO epoch 1: train_loss 0.5519 dev_accuracy 0.7992 (137 samples/s, step 217)",
    "epoch 2 ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 434/434 0:03:16",
    "gate PASSED: accuracy 0.8120 ≥ threshold 0.8000 (no champion to compare with)",
    "2026-12-04 16:30:25,422 INFO engine openvino-bf16: fastest served (594.3 texts/s, 16 clients)",
    "model version 1 promoted; serving at http://127.0.0.1:42273",
    # what still matters from the libraries stays visible: their warnings and errors
    "LAUNCH WARNING args nnodes will be overridden by env: PADDLE_NNODES value: 2",
    "[ERROR][Paddle2ONNX] [OP: pd_op.foo] not supported",
    "\x1b[33m[2026-12-04 16:29:58,544] [ WARNING]\x1b[0m - the tokenizer has no pad token\x1b[0m",
]


@pytest.mark.parametrize(("library", "line"), LIBRARY.items())
def test_each_librarys_line_is_recognised(library: str, line: str) -> None:
    assert library_of(line) == library.strip()


@pytest.mark.parametrize("line", OURS)
def test_our_lines_and_library_warnings_reach_the_terminal(line: str) -> None:
    assert library_of(line) is None


def test_every_pattern_has_a_sample() -> None:
    assert {name.strip() for name in LIBRARY} == set(LIBRARY_LINES)


def _printing_workflow(lines: list[str]) -> dict:
    script = "import sys; [print(line) for line in sys.argv[1:]]"
    return {
        "metadata": {"name": "chatter"},
        "spec": {
            "entrypoint": "main",
            "templates": [
                {"name": "main", "dag": {"tasks": [{"name": "talk", "template": "talk"}]}},
                {"name": "talk", "container": {"image": "x:1", "command": ["python", "-c", script, *lines]}},
            ],
        },
    }


@pytest.mark.parametrize("shown", [False, True])
def test_the_executor_keeps_library_lines_in_step_log_and_shows_them_on_request(
    tmp_path: Path, project_root: Path, shown: bool
) -> None:
    lines = [*LIBRARY.values(), *OURS]
    config = project_root / "configs/pipeline.yaml"
    opts = RunOptions(config, "local", [], tmp_path, git_sha="a", library_warnings=shown)
    console = tmp_path / "console.txt"
    with open(console, "w", encoding="utf-8") as out:
        workflow = _printing_workflow(lines)
        code, summary = LocalExecutor(load_config(config, "local"), workflow, opts, Console(file=out)).run()
    assert code == 0, summary
    terminal = console.read_text(encoding="utf-8")
    step_log = Path(summary["steps"][0]["log"]).read_text(encoding="utf-8")
    for line in lines:
        assert line in step_log
        assert (f"[talk] {line}" in terminal) is (shown or library_of(line) is None), line
