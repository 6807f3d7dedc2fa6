"""SIGTERM at any moment (steps/runtime/training/graceful_stop.py) and the launcher's hard stop (launch.py).

A real SIGTERM is sent to this process (`os.kill`) while a function runs in each phase of a worker: in setup and
while finishing it stops the worker at once, while training it only sets the flag the ranks agree on at a step
boundary, during rank 0's dev scoring it interrupts the scoring. The supervisor's `--stop-timeout` SIGKILLs a launcher
and a worker that ignore SIGTERM (a rank stuck in a collective) and exits 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from paddle_mlops_core.contracts import EXIT_TERMINATED, EXIT_USER_ERROR, LAUNCH_CONTROL_ENV, LAUNCH_STOP_TIMEOUT_ENV
from steps.runtime.runner import StepStopped
from steps.runtime.training import launch
from steps.runtime.training.graceful_stop import Phase, ScoringInterrupted, StopDecision, StopRequest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    """The handlers a test (the supervisor) installs in this process are put back after it."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _sigterm_soon(delay: float = 0.1) -> None:
    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()


def _work(seconds: float = 10.0) -> None:
    """Something that runs `seconds` unless an exception interrupts it (setup, scoring, an export)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_sigterm_in_setup_stops_the_worker_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LAUNCH_CONTROL_ENV, str(tmp_path))
    request = StopRequest()
    with request.installed(rank=1):
        assert request.phase is Phase.SETUP and (tmp_path / "pid.1").read_text() == str(os.getpid())
        started = time.monotonic()
        _sigterm_soon()
        with pytest.raises(StepStopped, match="during setup"):
            _work()
        assert time.monotonic() - started < 5
        # Stopping now: the launcher's repeated SIGTERMs only find the flag set.
        assert request.phase is Phase.STOPPING
        os.kill(os.getpid(), signal.SIGTERM)
        _work(0.3)
    assert request.requested


def test_sigterm_while_training_only_sets_the_flag_the_ranks_read_at_a_boundary() -> None:
    request = StopRequest()
    decision = StopDecision(world=1, use_gpu=False, request=request)
    with request.installed(rank=0):
        request.enter(Phase.TRAINING)
        assert not decision.after_step(1)
        _sigterm_soon()
        _work(0.5)  # not interrupted: the step in flight finishes
        assert request.requested and request.phase is Phase.TRAINING
        assert decision.after_step(2) and decision.after_epoch()


def test_sigterm_during_the_dev_scoring_interrupts_it() -> None:
    request = StopRequest()
    with request.installed(rank=0):
        request.enter(Phase.TRAINING)
        with request.during(Phase.SCORING):  # scoring undisturbed: back to training after it
            _work(0.05)
        assert request.phase is Phase.TRAINING
        scored = False
        _sigterm_soon()
        with pytest.raises(ScoringInterrupted):
            with request.during(Phase.SCORING):
                _work()
                scored = True
        assert not scored and request.phase is Phase.STOPPING
        os.kill(os.getpid(), signal.SIGTERM)  # while the trainer checkpoints: nothing raises again
        _work(0.3)


def test_sigterm_while_finishing_stops_the_worker_at_once() -> None:
    request = StopRequest()
    with request.installed(rank=0):
        request.enter(Phase.TRAINING)
        request.enter(Phase.FINISHING)
        started = time.monotonic()
        _sigterm_soon()
        with pytest.raises(StepStopped, match="during finishing"):
            _work()
        assert time.monotonic() - started < 5


@pytest.mark.parametrize("phase, raised", [(Phase.SCORING, ScoringInterrupted), (Phase.FINISHING, StepStopped)])
def test_a_signal_from_before_a_raising_phase_acts_when_it_begins(phase: Phase, raised: type[Exception]) -> None:
    request = StopRequest()
    with request.installed(rank=0):
        request.enter(Phase.TRAINING)
        os.kill(os.getpid(), signal.SIGTERM)
        _work(0.1)
        assert request.requested
        with pytest.raises(raised):
            request.enter(phase)
        assert request.phase is Phase.STOPPING


def test_the_stop_request_counts_the_grace_period_from_the_signal() -> None:
    request = StopRequest()
    assert request.seconds_left(170) == 160  # no signal (another error): the grace period less the exit
    request.signalled_at = time.monotonic() - 100
    assert 59 <= request.seconds_left(170) <= 60
    request.signalled_at = time.monotonic() - 500
    assert request.seconds_left(170) == 0


def test_importing_paddlenlp_after_the_handler_does_not_turn_sigterm_into_death() -> None:
    """PaddleNLP resets the SIGTERM action to the default when first imported (the trainer imports it while setting
    up): `installed()` imports it before installing the handler, so the signal still stops the worker cleanly."""
    code = (
        "import os, signal, sys, time\n"
        "from steps.runtime.runner import StepStopped\n"
        "from steps.runtime.training.graceful_stop import REQUEST\n"
        "with REQUEST.installed(0):\n"
        "    from steps.runtime.weights import ernie  # noqa: F401 - what Trainer.__init__ imports\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(10)\n"
        "    except StepStopped:\n"
        "        sys.exit(43)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != LAUNCH_CONTROL_ENV}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 43, (done.returncode, done.stderr[-2000:])


# --- the launcher's hard stop --------------------------------------------------------------------------------------

# A launcher and its worker that both ignore SIGTERM, as a rank stuck in an all-reduce for a peer that left does:
# the worker registers its pid where the supervisor forwards the signal.
STUCK_LAUNCHER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
control = os.environ["PADDLE_MLOPS_LAUNCH_DIR"]
with open(os.path.join(control, "pid.tmp"), "w") as out:
    out.write(str(worker.pid))
os.replace(os.path.join(control, "pid.tmp"), os.path.join(control, "pid.0"))
time.sleep(120)
"""


def _sigterm_once_registered(supervisor: launch.Supervisor, found: dict[str, float | int]) -> None:
    """SIGTERM to this process (the supervisor) once its worker registered; what it signalled and when."""

    def send() -> None:
        deadline = time.monotonic() + 60
        while not (supervisor.control / "pid.0").is_file() and time.monotonic() < deadline:
            time.sleep(0.02)
        found["worker"] = int((supervisor.control / "pid.0").read_text())
        found["signalled"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_hard_stop_kills_a_launcher_and_worker_that_ignore_sigterm_and_exits_143() -> None:
    supervisor = launch.Supervisor([sys.executable, "-c", STUCK_LAUNCHER], stop_timeout=1.0)
    found: dict[str, float | int] = {}
    _sigterm_once_registered(supervisor, found)
    assert supervisor.run() == EXIT_TERMINATED
    took = time.monotonic() - found["signalled"]
    assert 1.0 <= took < 5, f"{took:.1f} s from SIGTERM to the exit; the stop timeout is 1 s"
    deadline = time.monotonic() + 5
    while not _gone(int(found["worker"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(int(found["worker"])), "the stuck worker outlived the hard stop"


def test_the_stop_timeout_comes_from_the_flag_or_the_environment_and_defaults_to_none() -> None:
    rest = ["--nnodes", "1", "steps/train.py", "--workspace", "ws"]
    assert launch.stop_timeout(rest, {}) == (None, rest)  # today's behaviour: no hard stop
    assert launch.stop_timeout(["--stop-timeout", "160", *rest], {}) == (160.0, rest)
    assert launch.stop_timeout(rest, {LAUNCH_STOP_TIMEOUT_ENV: "95"}) == (95.0, rest)
    assert launch.stop_timeout(["--stop-timeout=20", *rest], {LAUNCH_STOP_TIMEOUT_ENV: "95"})[0] == 20.0
    for bad in ("0", "-5", "soon"):
        with pytest.raises(launch.RendezvousError, match="not a number of seconds"):
            launch.stop_timeout(["--stop-timeout", bad, *rest], {})
    assert launch.main(["--stop-timeout", "soon", "--nnodes", "1", "steps/train.py"]) == EXIT_USER_ERROR
