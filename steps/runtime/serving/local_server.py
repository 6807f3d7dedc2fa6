"""The local serving target: a `python -m steps.serve` process on loopback, started, checked and swapped.

Each task's model has its own server: `<home>/serving/<model>/current.json` records the one that serves
(pid, URL, model version); each server logs to `<home>/serving/<model>/server-<version>.log`. A new server
replaces the recorded one only after it is ready, answered the smoke requests and `champion` points at it; a
failed check stops the new one. Other tasks' servers are never touched.

`ensure_local` keeps the champion served when a run rolls nothing out (its model was published before, or refused):
a no-op when the recorded server is alive and serves the champion, else (e.g. after `paddle-mlops serve stop`) it
starts the champion's server again without moving `champion`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from paddle_mlops_core.config.models import PipelineConfig
from steps.runtime import config_names
from steps.runtime.release.champion import Registry
from steps.runtime.release.health import HttpProbe
from steps.runtime.release.rollout_outcome import (
    ALREADY_SERVED,
    PROMOTED,
    ROLLED_BACK,
    SERVED,
    SMOKE_CHECKED,
    Outcome,
    RolloutFailed,
)
from steps.runtime.serving.processes import stop_group

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def serving_dir(home: Path, model: str) -> Path:
    """Where the local server of the served model `model` (serving.model_name) keeps its record and logs."""
    return home / "serving" / model


def served_models(home: Path) -> list[str]:
    """The served models that have a recorded local server."""
    return sorted(p.parent.name for p in (home / "serving").glob("*/current.json"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); /proc tells it apart on Linux.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def _is_model_server(pid: int) -> bool:
    """Guard against a recycled pid: only signal processes that run `steps.serve`."""
    try:
        return b"steps.serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc").is_dir()


def stop_pid(pid: int, grace_seconds: float = 10.0) -> bool:
    """SIGTERM the server's process group, wait, then SIGKILL. True if something was stopped."""
    if not _alive(pid) or not _is_model_server(pid):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def read_current(home: Path, model: str) -> dict[str, Any] | None:
    path = serving_dir(home, model) / "current.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def stop_local_server(home: Path, model: str | None = None) -> bool:
    """Stop the recorded server of `model`, or of every served model (`paddle-mlops serve stop`). True if one
    was running."""
    stopped = False
    for name in [model] if model else served_models(home):
        current = read_current(home, name)
        if not current:
            continue
        stopped = stop_pid(int(current["pid"])) or stopped
        (serving_dir(home, name) / "current.json").unlink(missing_ok=True)
    return stopped


def start_local_server(
    cfg: PipelineConfig, model_uri: str, version: str, home: Path, common: list[str]
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `python -m steps.serve` detached (own session) so it outlives this step."""
    name = config_names.served_model(cfg)
    directory = serving_dir(home, name)
    directory.mkdir(parents=True, exist_ok=True)
    ready_file = directory / f"server-{version}.ready.json"
    ready_file.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "steps.serve",
        *common,
        "--model-uri",
        model_uri,
        "--host",
        cfg.serving.host,
        "--port",
        str(cfg.serving.port),
        "--model-name",
        name,
        "--ready-file",
        str(ready_file),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    with open(directory / f"server-{version}.log", "ab") as logfile:
        proc = subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, ready_file


def wait_local_ready(
    proc: subprocess.Popen[bytes], ready_file: Path, probe: Any, cfg: PipelineConfig, log_path: Path
) -> str:
    deadline = time.monotonic() + cfg.serving.ready_timeout_seconds
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise RolloutFailed(f"model server exited with code {code} before it was ready; see {log_path}")
        if ready_file.is_file():
            url = json.loads(ready_file.read_text(encoding="utf-8"))["url"]
            if probe.ready(url, cfg.serving.model_name):
                return url
        time.sleep(0.2)
    raise RolloutFailed(f"model server not ready within {cfg.serving.ready_timeout_seconds}s; see {log_path}")


def _start_checked(
    cfg: PipelineConfig, model_uri: str, version: str, home: Path, common: list[str], probe: Any
) -> tuple[subprocess.Popen[bytes], str]:
    """A new server of `version`, ready and answering the smoke requests; RolloutFailed (the new one stopped) if not."""
    name = config_names.served_model(cfg)
    proc, ready_file = start_local_server(cfg, model_uri, version, home, common)
    try:
        url = wait_local_ready(proc, ready_file, probe, cfg, serving_dir(home, name) / f"server-{version}.log")
        probe.smoke(url, name, cfg.smoke_payload())
    except RolloutFailed:
        stop_group(proc)
        raise
    return proc, url


def _take_over(
    cfg: PipelineConfig, home: Path, proc: subprocess.Popen[bytes], url: str, version: str, model_uri: str,
    previous: dict[str, Any] | None,
) -> None:  # fmt: skip
    """Record the new server as the one that serves, then stop the one recorded before it."""
    name = config_names.served_model(cfg)
    port = int(url.rsplit(":", 1)[1])
    _write_json(
        serving_dir(home, name) / "current.json",
        {"pid": proc.pid, "url": url, "port": port, "model": name, "task": cfg.task,
         "model_version": version, "model_uri": model_uri},
    )  # fmt: skip
    if previous and int(previous.get("pid", -1)) != proc.pid:
        stop_pid(int(previous["pid"]))


def rollout_local(
    cfg: PipelineConfig,
    model_uri: str,
    version: str,
    home: Path,
    registry: Registry,
    common: list[str],
    probe: Any = None,
) -> Outcome:
    probe = probe or HttpProbe()
    previous = read_current(home, config_names.served_model(cfg))
    try:
        proc, url = _start_checked(cfg, model_uri, version, home, common, probe)
    except RolloutFailed as exc:
        return Outcome(ROLLED_BACK, url=(previous or {}).get("url", ""), reason=str(exc))
    registry.promote(version)
    # The old server goes only after the new one serves and `champion` points at it.
    _take_over(cfg, home, proc, url, version, model_uri, previous)
    return Outcome(PROMOTED, url=url, canary=SMOKE_CHECKED)  # one server at a time: no traffic to split


def serving(home: Path, model: str, version: str, probe: Any) -> str | None:
    """The URL of the recorded server of `model` when it is alive, serves `version` and answers ready; else None."""
    current = read_current(home, model)
    if not current or str(current.get("model_version")) != version:
        return None
    pid = int(current.get("pid", -1))
    if not (_alive(pid) and _is_model_server(pid)):
        return None
    url = str(current.get("url") or "")
    return url if url and probe.ready(url, model) else None


def ensure_local(
    cfg: PipelineConfig, model_uri: str, version: str, home: Path, common: list[str], probe: Any = None
) -> Outcome:
    """The champion `version` served: the recorded server when it already serves it (ALREADY_SERVED), else a new one
    started, checked and recorded (SERVED; whatever server was recorded stops after). `champion` is not moved."""
    probe = probe or HttpProbe()
    name = config_names.served_model(cfg)
    url = serving(home, name, version, probe)
    if url:
        return Outcome(ALREADY_SERVED, url=url)
    previous = read_current(home, name)
    proc, url = _start_checked(cfg, model_uri, version, home, common, probe)
    _take_over(cfg, home, proc, url, version, model_uri, previous)
    return Outcome(SERVED, url=url, canary=SMOKE_CHECKED)
