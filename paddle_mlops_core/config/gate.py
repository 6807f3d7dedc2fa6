"""`gate:` what a trained model must reach before it is published: a threshold, the cheap baseline, the champion.

How the baseline itself is fitted is `baseline:` (baseline.py); which metrics a task type reports is tasks.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from paddle_mlops_core.config.strict import Strict


class GateConfig(Strict):
    """The evaluation gate: an absolute threshold, the cheap baseline fitted on the same split, and a tolerance
    against the current champion."""

    metric: str | None = Field(
        None,
        description="the test metric the gate compares (one the task type reports); null: the task type's own "
        "(accuracy; micro_f1 for token-classification)",
    )
    threshold: float = Field(0.80, ge=0, le=1)
    tolerance: float = Field(0.01, ge=0, le=1)
    baseline: Literal["require", "warn", "off"] = Field(
        "require",
        description="require: the metric must reach the cheap baseline's (fitted by evaluate on the same train split, "
        "scored on the same test split) plus baseline_margin, or the model is not published (validate refuses it); "
        "warn: the comparison is reported and logged as a warning only; off: no baseline is fitted",
    )
    baseline_margin: float = Field(
        0.0, ge=0, le=1, description="by how much (absolute) the metric must beat the baseline's under `require`"
    )

    @field_validator("baseline", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        """YAML 1.1 reads a bare `off` (in a file or `--set gate.baseline=off`) as false."""
        return "off" if v is False else v
