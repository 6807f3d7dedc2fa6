"""What a rollout ends with: `promoted` or `rolled-back`, the serving URL, the reason, the regions and what checked
the new version (a live canary, or smoke requests only).

`RolloutFailed` is how a failed check says so; its message becomes the reason recorded on the model version.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROMOTED = "promoted"
ROLLED_BACK = "rolled-back"
# A local run that rolled nothing out keeps the champion served (steps/runtime/serving/local_server.py ensure_local):
# its server was running already, or was started again; `champion` did not move.
ALREADY_SERVED = "already-served"
SERVED = "served"
# What checked a promoted version before it took all traffic (`rollout.canary`): a share of live traffic for the
# window, or only smoke requests (RawDeployment without a canary router, a first Serverless revision, local).
CANARY_PASSED = "canary passed"
SMOKE_CHECKED = "smoke-checked, no canary"


class RolloutFailed(Exception):
    """A check failed; the message is the reason recorded on the model version."""


@dataclass
class Outcome:
    outcome: str
    url: str = ""
    reason: str = ""
    regions: list[str] = field(default_factory=list)
    canary: str = ""  # CANARY_PASSED | SMOKE_CHECKED when promoted; "" when nothing was rolled out
