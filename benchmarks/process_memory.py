"""Peak memory of a process tree while it runs, for benchmarks/data_scale.py.

A thread polls the tree every `interval` seconds: the sum of every process's resident set (the figure a container's
memory limit is held to), and for each training rank (a process with `PADDLE_TRAINER_ID` in its environment, as
paddle.distributed.launch starts them) its own high-water mark (`VmHWM` in /proc/<pid>/status, the kernel's, which
misses no spike between polls) and its resident set plus its children's.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import psutil

MIB = 1024 * 1024
RANK_ENV = "PADDLE_TRAINER_ID"


def high_water_mark(pid: int) -> int:
    """The process's peak resident set in bytes (`VmHWM`); 0 once it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class TreePeak:
    """Polls the tree under `pid` until `stop()`: `peak_bytes` (whole tree), `rank_peak_bytes` (rank -> bytes) and
    `rank_pids` (rank -> pid)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_bytes = 0
        self.rank_peak_bytes: dict[int, int] = {}
        self.rank_pids: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.interval)

    def sample(self) -> None:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss: dict[int, int] = {}
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                rss[proc.pid] = proc.memory_info().rss
                if proc.pid not in self.rank_pids.values():
                    rank = proc.environ().get(RANK_ENV)
                    if rank is not None and rank.isdigit() and "train.py" in " ".join(proc.cmdline()):
                        self.rank_pids[int(rank)] = proc.pid
        self.peak_bytes = max(self.peak_bytes, sum(rss.values()))
        for rank, pid in self.rank_pids.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                children = sum(rss.get(c.pid, 0) for c in psutil.Process(pid).children(recursive=True))
                now = max(high_water_mark(pid), rss.get(pid, 0)) + children
                self.rank_peak_bytes[rank] = max(self.rank_peak_bytes.get(rank, 0), now)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
