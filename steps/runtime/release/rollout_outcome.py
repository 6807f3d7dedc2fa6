"""What a rollout ends with: `promoted` or `rolled-back`, the serving URL, the reason and the regions.

`RolloutFailed` is how a failed check says so; its message becomes the reason recorded on the model version.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROMOTED = "promoted"
ROLLED_BACK = "rolled-back"


class RolloutFailed(Exception):
    """A check failed; the message is the reason recorded on the model version."""


@dataclass
class Outcome:
    outcome: str
    url: str = ""
    reason: str = ""
    regions: list[str] = field(default_factory=list)
