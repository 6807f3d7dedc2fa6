"""`baseline:` how evaluate fits the cheap model every candidate is compared with (docs/benchmarks.md, "Quality").

The kind follows the task type: char n-gram TF-IDF + logistic regression for text classification, the same on pair
features for text matching, a linear-chain CRF (python-crfsuite) for NER. How the gate uses it is `gate.baseline`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BaselineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    time_limit_seconds: float = Field(
        900.0,
        gt=0,
        description="the most a baseline's fit and scoring may take; past it evaluate stops with an error naming "
        "this key (the CRF on the whole People's Daily corpus takes about 3 minutes on 2 CPU cores)",
    )
    crf_iterations: int = Field(100, ge=1, description="L-BFGS iterations of the NER baseline's CRF")
    bootstrap_samples: int = Field(
        1000, ge=100, description="paired bootstrap resamples of the test split for the difference's interval"
    )
    confidence: float = Field(0.95, gt=0.5, lt=1, description="the interval's confidence level")
    seed: int = Field(0, description="seed of the bootstrap resampling")
