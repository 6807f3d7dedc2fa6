"""What a fitted baseline is: its answers to the test split and how they were made; the kind per task type; the
error of a baseline that could not be fitted. The lowest module of the package: the others import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION, TEXT_MATCHING, TOKEN_CLASSIFICATION
from steps.runtime.runner import StepError

KINDS: dict[str, str] = {TEXT_CLASSIFICATION: "text", TEXT_MATCHING: "pairs", TOKEN_CLASSIFICATION: "crf"}


class BaselineError(StepError):
    """The baseline could not be fitted in time: the platform's failure, never a verdict on the model."""


@dataclass
class Fitted:
    """A baseline's answers to the test split, in the task's answer shape, and how they were made."""

    kind: str
    description: str
    answers: list[dict[str, Any]]
    settings: dict[str, Any]
    seconds: float
    key: str = ""
    cached: bool = False
    versions: dict[str, str] = field(default_factory=dict)
    # the CRF's fitted weights (crf.py `weights`), which `model.baseline_product` folds into the model; None for the
    # other kinds
    weights: dict[str, Any] | None = None
