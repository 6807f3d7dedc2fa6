"""What Argo Workflows v4.1.2 decides about a failed step, reimplemented for tests (no Go, no controller here).

argoproj/argo-workflows v4.1.2:
- workflow/controller/operator.go `inferFailedReason` (from `assessNodeStatus`): a failed pod with a status message
  (the kubelet's eviction, a node shutdown, activeDeadlineSeconds) is node phase Failed with that message; a main
  container that exited non-zero (an OOM kill: 137) is Failed; a pod that disappeared (deleted, its node gone, a
  controller that saw it go) is Error, "pod deleted" (`markNodeError`), with no exit code.
- workflow/controller/operator.go `processNodeRetries`, in its order: with `backoff.maxDuration`, no retry once
  `maxDuration` has passed since the FIRST attempt started ("Max duration limit exceeded") or when the backoff would
  end past it ("Backoff would exceed max duration limit"); the wait is `duration * factor^(attempts-1)`, at most
  `cap`, from the last attempt's end; then the policy by the last attempt's phase (`Always`: Failed and Error,
  `OnError`: Error only, `OnFailure`: Failed only; `RetryPolicyActual`: `Always` when only an expression is set);
  then `limit` (`len(children) > limit`: "No more retries left"); then `expression`
  (`buildRetryStrategyLocalScope`: `retries`, `lastRetry.exitCode` ("-1" when the pod left none), `.status`,
  `.duration`, `.message`, all strings).
- workflow/util/util.go `FormulateRetryWorkflow` (`argo retry`): a failed pod node is reset (its failed attempts
  deleted, so the next attempt is number 0 again) unless one of its children succeeded (`isDescendantNodeSucceeded`,
  which counts a task's lifecycle-hook node `<task>.onExit` as a child: argoproj/argo-workflows#13184); succeeded
  nodes are kept and never run again; the workflow's own `<workflow>.onExit` nodes are always dropped and run again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.expr_lang import evaluate

_UNITS = {"s": 1, "m": 60, "h": 3600}


def seconds(duration: str | int) -> float:
    """wfv1.ParseStringToDuration: a Go duration (`30m`, `1m30s`, `36600s`) or plain seconds."""
    text = str(duration)
    if text.isdigit():
        return float(text)
    parts = re.findall(r"(\d+)([smh])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {duration!r}")
    return float(sum(int(n) * _UNITS[u] for n, u in parts))


@dataclass(frozen=True)
class Attempt:
    """One child node of a retry node: its phase, when it ran (seconds on one clock), its exit code and message."""

    phase: str  # Failed, Error or Succeeded
    started: float
    finished: float
    exit_code: str = "-1"
    message: str = ""


# What happened to the step's pod -> (node phase, the main container's exit code, message), as inferFailedReason and
# the "pod deleted" path decide it.
POD_FATES: dict[str, tuple[str, str, str]] = {
    "evicted": ("Failed", "143", "The node was low on resource: memory."),  # SIGTERM handled, then exit 143
    "drained": ("Failed", "143", "Pod was terminated in response to imminent node shutdown."),
    "oom-killed": ("Failed", "137", "main: OOMKilled (exit code 137)"),
    "deleted": ("Error", "-1", "pod deleted"),  # gone before the controller saw it end: no exit code
    "node-lost": ("Error", "-1", "pod deleted"),
    "api-error": ("Failed", "1", "main: Error (exit code 1)"),
    "job-failed": ("Failed", "2", "main: Error (exit code 2)"),  # the training job failed: exit 2
}


def attempt(fate: str, started: float, finished: float) -> Attempt:
    phase, code, message = POD_FATES[fate]
    return Attempt(phase, started, finished, code, message)


def next_attempt(strategy: dict[str, Any], attempts: list[Attempt], now: float) -> float | str:
    """When Argo starts the next attempt after `attempts` (the last one failed, at `now` or before): that time, or
    why it fails the step instead (processNodeRetries, module docstring)."""
    last = attempts[-1]
    backoff = strategy.get("backoff")
    at = now
    if backoff:
        deadline = None
        if backoff.get("maxDuration"):
            deadline = attempts[0].started + seconds(backoff["maxDuration"])
            if now > deadline:
                return "Max duration limit exceeded"
        wait = seconds(backoff["duration"]) * float(backoff.get("factor") or 1) ** (len(attempts) - 1)
        if backoff.get("cap"):
            wait = min(wait, seconds(backoff["cap"]))
        at = max(now, last.finished + wait)
        if deadline is not None and last.finished + wait > deadline:
            return "Backoff would exceed max duration limit"
    policy = strategy.get("retryPolicy") or ("Always" if strategy.get("expression") else "OnFailure")
    retried = {"Always": {"Failed", "Error"}, "OnError": {"Error"}, "OnFailure": {"Failed"}}[policy]
    if last.phase not in retried:
        return f"Node not set to be retried ({policy}, phase {last.phase})"
    limit = strategy.get("limit")
    if limit is not None and len(attempts) > int(limit):
        return "No more retries left"
    if strategy.get("expression"):
        scope = {
            "retries": str(len(attempts) - 1),
            "lastRetry": {
                "exitCode": last.exit_code,
                "status": last.phase,
                "duration": str(int(last.finished - last.started)),
                "message": last.message,
            },
        }
        if not evaluate(strategy["expression"], scope):
            return "retryStrategy.expression evaluated to false"
    return at


def reset_by_argo_retry(task_phase: str, children: dict[str, str]) -> bool:
    """Whether `argo retry` runs a task again: only a failed one none of whose children (attempts, its exit hook
    `<task>.onExit`) succeeded (FormulateRetryWorkflow, isDescendantNodeSucceeded)."""
    if task_phase not in ("Failed", "Error"):
        return False
    return not any(phase == "Succeeded" for phase in children.values())
