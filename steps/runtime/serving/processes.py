"""Stopping child processes that lead their own process group (servers and their workers)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM `proc`'s process group, wait up to `grace_s` for `proc`, then SIGKILL the group.

    `proc` must have been started in a group of its own (`start_new_session=True` or
    `process_group=0`); the whole group is signalled, so workers it forked stop with it.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group is gone already
        proc.wait()
        return
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
