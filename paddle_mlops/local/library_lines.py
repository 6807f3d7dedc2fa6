"""Which lines of a step's output are the libraries' own chatter: kept in the step's `step.log`, not on the terminal.

A local run streams every step's output; the terminal should read as the run's story (our result lines, progress,
warnings and errors), so each library line below goes only to `step.log`, and `paddle-mlops run --library-warnings`
shows them again. Each pattern is the format the library itself writes, read off its source (versions of uv.lock):

- Paddle's launcher banner: paddle/distributed/launch/context/__init__.py `get_logger`, logger `LAUNCH` with format
  `%(name)s %(levelname)s %(asctime)s %(message)s` (its INFO/DEBUG lines; a WARNING or ERROR stays visible).
- Paddle's FLAGS dump: paddle/distributed/parallel.py `_print_modified_flags`, a `===…=== Modified FLAGS detected
  ===…===` line, one `FLAGS(name=…, current_value=…, default_value=…)` per flag, a closing line of `=`.
- PaddleNLP's logger: paddlenlp/utils/log.py, colorlog `[%(asctime)-15s] [%(levelname)8s] - %(message)s` (INFO and
  DEBUG; the colour codes are ignored when matching).
- Paddle2ONNX's progress: its C++ core prints `[Paddle2ONNX] …` (an `[ERROR][Paddle2ONNX]` line stays visible).
- ONNX Runtime's advice: onnxruntime/quantization/quantize.py `logging.warning("Please consider (to run)
  pre-processing before quantization …")` on the root logger, so in our log format.
- httpx's per-request INFO line: httpx/_client.py `logger.info('HTTP Request: %s %s "%s %d %s"', …)`, through our
  root handler.
- MLflow's and Alembic's INFO lines: mlflow/utils/logging_utils.py `%(asctime)s %(levelname)s %(name)s: …` with date
  format `%Y/%m/%d %H:%M:%S` (logger `mlflow.*`), and Alembic's `INFO  [alembic.runtime.migration] …` while MLflow
  creates its database.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What our own log format puts before a message (steps/runtime/runner.py: `%(asctime)s %(levelname)s %(message)s`).
_OURS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:INFO|WARNING)"
LIBRARY_LINES = {
    "paddle-launch": re.compile(r"^LAUNCH (?:INFO|DEBUG) "),
    "paddle-flags": re.compile(r"^(?:=+ Modified FLAGS detected =+|FLAGS\(name=.*\)|={20,})$"),
    "paddlenlp": re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[\s*(?:INFO|DEBUG)\] - "),
    "paddle2onnx": re.compile(r"^\[Paddle2ONNX\]"),
    "onnxruntime-quantization": re.compile(rf"^{_OURS} Please consider (?:to run )?pre-processing before quantization"),
    "httpx": re.compile(rf'^{_OURS} HTTP Request: [A-Z]+ \S+ "HTTP/[\d.]+ \d{{3}} '),
    "mlflow": re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (?:INFO|DEBUG) mlflow[.\w]*: "),
    "alembic": re.compile(r"^INFO {2}\[alembic\.[\w.]+\] "),
}


def library_of(line: str) -> str | None:
    """The library a line of step output comes from (a key of LIBRARY_LINES), None for our own lines."""
    plain = _ANSI.sub("", line).rstrip()
    return next((name for name, pattern in LIBRARY_LINES.items() if pattern.search(plain)), None)
