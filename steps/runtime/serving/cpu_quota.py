"""How many CPUs this process may really use: the container's CPU quota, else its affinity mask.

A pod's CPU limit is a CFS quota, not a CPU count: `os.cpu_count()` in a 2-CPU pod on a 64-core node says 64,
and 64 Paddle math threads on a 2-CPU quota spend most of each period throttled. The quota is read where
the kernel keeps it, walking from this process's cgroup up to the root and keeping the tightest limit (a
parent's limit binds its children; what container runtimes mount as the root is already the container's):

- cgroup v2: `cpu.max` holds `<quota> <period>` in microseconds, or `max <period>` for no limit;
- cgroup v1: `cpu.cfs_quota_us` (-1 for no limit) and `cpu.cfs_period_us` in the `cpu` controller's hierarchy.

The thread count is the quota rounded down (at least 1) and never more than the CPUs the affinity mask
allows (`taskset`, the static CPU manager's exclusive cores).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_limit(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _v1_limit(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _own_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in the v1 `cpu` controller's (None where absent)."""
    v2 = v1 = None
    for line in (_read(proc_cgroup) or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _tightest(base: Path, own: str | None, read: Callable[[Path], float | None]) -> float | None:
    """The smallest limit from `base/own` up to `base` (`own` may not exist inside a namespaced mount)."""
    limits = []
    directory = base / (own or "/").lstrip("/")
    while True:
        if directory.is_dir():
            limit = read(directory)
            if limit is not None:
                limits.append(limit)
        if directory == base or base not in directory.parents:
            break
        directory = directory.parent
    return min(limits) if limits else None


def cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """CPUs' worth of time per period the cgroup limits allow this process; None when nothing limits it."""
    v2_path, v1_path = _own_paths(proc_cgroup)
    if (root / "cgroup.controllers").is_file():  # the unified (v2) hierarchy is mounted at the root
        return _tightest(root, v2_path, _v2_limit)
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name).is_dir():
            return _tightest(root / name, v1_path, _v1_limit)
    return None


def affinity_cpus() -> int:
    """CPUs the scheduler may run this process on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Math threads for one predictor: the quota rounded down, at least 1, at most the affinity mask's CPUs."""
    cpus = affinity_cpus()
    quota = cpu_quota(root, proc_cgroup)
    if quota is None:
        return cpus
    return max(1, min(cpus, math.floor(quota)))
