"""Per-thread control of Intel OpenMP's spin-wait, the runtime Paddle's CPU kernels run on.

After a parallel region Intel OpenMP (`libiomp5`, which the paddlepaddle wheels ship and load)
keeps its worker threads spinning for `KMP_BLOCKTIME` (default 200 ms) so that the next region
starts without a wake-up; inside one inference that is what makes it fast. The runtime silently
drops the spin to 0 once a process has more OpenMP threads than CPUs (a server's loop thread and
model thread each fork a team). `kmp_set_blocktime` sets the spin for the teams the *calling*
thread forks, and a value set that way holds, so each thread that runs the model sets its own.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def loaded_runtime(maps: Path = Path("/proc/self/maps")) -> str | None:
    """Path of the Intel OpenMP runtime mapped into this process, or None (not loaded, not Linux)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)  # address perms offset device inode [path]
        if len(fields) == 6 and Path(fields[5]).name.startswith("libiomp5"):
            return fields[5]
    return None


def _runtime() -> ctypes.CDLL | None:
    path = loaded_runtime()
    return ctypes.CDLL(path) if path else None  # already mapped: dlopen hands back the loaded library


def set_blocktime(ms: int) -> bool:
    """Spin `ms` milliseconds after each parallel region this thread forks; False if no libiomp5."""
    runtime = _runtime()
    if runtime is None:
        log.debug("no Intel OpenMP runtime loaded; blocktime left as is")
        return False
    runtime.kmp_set_blocktime(ctypes.c_int(ms))
    return True


def get_blocktime() -> int | None:
    """The calling thread's blocktime in milliseconds, or None without libiomp5."""
    runtime = _runtime()
    return None if runtime is None else int(runtime.kmp_get_blocktime())
