"""`training.checkpoint`: when the trainer checkpoints, how many it keeps, and how long a stopping pod may take.

Its own module so the training section (`training.py`) stays one screen; `training.TrainingConfig` holds it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

# What `benchmarks/checkpoint_cost.py` measured for the production model (ERNIE 3.0 medium-sized: 75.4 M parameters,
# AdamW moments and the best-on-dev copy, 1151 MiB a checkpoint) on 2 AMD EPYC cores shared with other work (load
# average 4-5): 33.5 s and 50.1 s in two runs from the stop request to a complete checkpoint in the store (copy off
# the training tensors 0.6-5.3 s, serialising 6.0-11.4 s, hashing and uploading to moto's S3 server on the same
# machine 26.9-33.4 s; MinIO on a cluster network is faster); the worse, rounded up. docs/benchmarks.md
# "Checkpoints". The grace period is that times a safety factor of 3 (a slower store, a longer step in flight, a
# loaded node) plus the 10 s the signal and the processes' exit take, rounded up to ten seconds.
MEASURED_STOP_SECONDS = 51
GRACE_SAFETY_FACTOR = 3
DEFAULT_GRACE_SECONDS = -(-(MEASURED_STOP_SECONDS * GRACE_SAFETY_FACTOR + 10) // 10) * 10  # 170


class CheckpointConfig(BaseModel):
    """Checkpoints go to the run's store while training (steps/runtime/training/checkpoint_store.py); every trigger
    that is not 0 applies, whichever comes first. Whenever any is on, the end of training is checkpointed too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every_steps: int = Field(0, ge=0, description="optimizer steps between checkpoints; 0: no step trigger")
    every_seconds: float = Field(
        0, ge=0, description="seconds of training between checkpoints; 0: no time trigger (dev and prod: 600)"
    )
    epoch_end: bool = Field(
        True,
        description="also checkpoint at the end of every epoch (after its dev evaluation), so a local run keeps one "
        "per epoch; the end of training (after the last epoch's) is checkpointed whenever any trigger is on, so a "
        "step stopped while exporting only exports again; false with both triggers 0 disables checkpoints",
    )
    keep: int = Field(
        2,
        ge=1,
        description="complete checkpoints kept; older ones are deleted once a newer is complete, never those of "
        "another live trainer of the same run",
    )
    grace_seconds: int = Field(
        DEFAULT_GRACE_SECONDS,
        ge=10,
        description="terminationGracePeriodSeconds of the training pods: SIGTERM at any moment exits within it "
        "(while training, after a checkpoint at the next step boundary); sized from the measured time to a complete "
        f"checkpoint of the production model ({MEASURED_STOP_SECONDS} s) x {GRACE_SAFETY_FACTOR} + 10 s, rounded up "
        "(docs/benchmarks.md)",
    )

    @property
    def enabled(self) -> bool:
        return bool(self.every_steps or self.every_seconds or self.epoch_end)

    @model_validator(mode="after")
    def _grace_covers_the_measurement(self) -> CheckpointConfig:
        if self.grace_seconds < MEASURED_STOP_SECONDS:
            raise ValueError(
                f"training.checkpoint.grace_seconds {self.grace_seconds} is shorter than the measured "
                f"{MEASURED_STOP_SECONDS} s to a complete checkpoint of the production model: a stopped pod would be "
                "killed before its checkpoint is in the store. Raise it (benchmarks/checkpoint_cost.py measures it)"
            )
        return self
