"""Library noise kept out of step logs: warnings and glog lines that say nothing about the run.

Importing Paddle prints `No ccache found` (paddle/utils/cpp_extension/extension_utils.py, a hint for compiling
C++ extensions, which no step does) and setuptools' `Setuptools is replacing distutils`; Paddle's C++ core logs
INFO/WARNING lines through glog. `install()` runs in `steps/__init__.py`, before any step imports Paddle, and
also sets the environment so that worker processes `paddle.distributed.launch` starts are quiet too.
`PADDLE_MLOPS_LIBRARY_WARNINGS=1` (`paddle-mlops run --library-warnings`) shows everything again.
"""

from __future__ import annotations

import os
import warnings

from paddle_mlops_core.contracts import QUIET_LIBRARIES_ENV, SHOW_LIBRARY_WARNINGS_ENV, SILENCED_WARNINGS

SHOW_ENV = SHOW_LIBRARY_WARNINGS_ENV
SILENCED = SILENCED_WARNINGS
GLOG_ERRORS_ONLY = QUIET_LIBRARIES_ENV["GLOG_minloglevel"]
# What the user had set before install() touched the environment (showing() leaves those alone).
_USER_SET = frozenset(k for k in ("GLOG_minloglevel",) if k in os.environ)


def shown() -> bool:
    return os.environ.get(SHOW_ENV, "").lower() in ("1", "true", "yes")


def install() -> None:
    if shown():
        return
    for prefix in SILENCED:
        warnings.filterwarnings("ignore", message=prefix, category=UserWarning)
    inherited = [os.environ["PYTHONWARNINGS"]] if os.environ.get("PYTHONWARNINGS") else []
    if not any(prefix in "".join(inherited) for prefix in SILENCED):
        os.environ["PYTHONWARNINGS"] = ",".join([*inherited, QUIET_LIBRARIES_ENV["PYTHONWARNINGS"]])
    os.environ.setdefault("GLOG_minloglevel", GLOG_ERRORS_ONLY)


def showing(env: dict[str, str]) -> dict[str, str]:
    """`env` for a child process that should show the library noise: the flag set, our filters removed."""
    shown_env = {**env, SHOW_ENV: "1"}
    kept = [f for f in shown_env.get("PYTHONWARNINGS", "").split(",") if f and not any(p in f for p in SILENCED)]
    if kept:
        shown_env["PYTHONWARNINGS"] = ",".join(kept)
    else:
        shown_env.pop("PYTHONWARNINGS", None)
    if shown_env.get("GLOG_minloglevel") == GLOG_ERRORS_ONLY and "GLOG_minloglevel" not in _USER_SET:
        shown_env.pop("GLOG_minloglevel")
    return shown_env
