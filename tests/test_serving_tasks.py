"""The model server per task type (#17 item 4): each task's request and answer shapes over V1 and V2 on real
tiny exports, its V2 metadata, and over a thousand malformed requests per task answered with a 4xx."""

from __future__ import annotations

import asyncio
import functools
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving import model_server as serving
from tests.fixtures_ernie import make_exported_model
from tests.serving_fixtures import client, quiet_kserve  # noqa: F401 — quiet_kserve is autouse
from tests.test_serving_inputs import BAD_REQUEST_KINDS

NER_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")
TEXTS = ("江泽民在北京会见安南", "花呗怎么还款", "花呗如何还钱", "国务院总理李鹏抵达上海")


@functools.cache
def tiny_export(task: str) -> Path:
    labels = NER_LABELS if task == "token-classification" else ("0", "1")
    directory = Path(tempfile.mkdtemp(prefix=f"tiny-{task}-")) / "model"
    return make_exported_model(directory, labels=labels, texts=TEXTS, max_seq_len=8, task=task)


def _app(task: str, name: str, **settings: Any) -> Any:
    model = serving.ErnieModel(name, ServingConfig(**settings), model_dir=str(tiny_export(task)))
    model.load()
    return serving.create_app([model], model.cfg.max_request_bytes)


def _post(app: Any, path: str, body: Any) -> tuple[int, Any]:
    async def go() -> tuple[int, Any]:
        async with client(app) as c:
            resp = await c.post(path, json=body)
            return resp.status_code, resp.json()

    return asyncio.run(go())


def _get(app: Any, path: str) -> Any:
    async def go() -> Any:
        async with client(app) as c:
            return (await c.get(path)).json()

    return asyncio.run(go())


@pytest.mark.slow
def test_ner_answers_entities_with_offsets_over_v1_and_v2() -> None:
    app = _app("token-classification", "ernie-ner")
    text = "国务院总理李鹏昨天抵达上海，江泽民在北京会见安南"  # longer than one window of 6 characters
    code, body = _post(app, "/v1/models/ernie-ner:predict", {"instances": [text, "安南"]})
    assert code == 200 and len(body["predictions"]) == 2
    for prediction, sent in zip(body["predictions"], (text, "安南"), strict=True):
        assert set(prediction) == {"entities"}
        for entity in prediction["entities"]:  # random weights: whatever it finds must point into the text sent
            assert sent[entity["start"] : entity["end"]] == entity["text"] and entity["type"] in ("PER", "LOC", "ORG")
            assert 0 <= entity["score"] <= 1
    v2 = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": [text, "安南"]}]}
    code, body = _post(app, "/v2/models/ernie-ner/infer", v2)
    assert code == 200
    (out,) = body["outputs"]
    assert out["name"] == "entities" and out["datatype"] == "BYTES" and out["shape"] == [2]
    _, v1 = _post(app, "/v1/models/ernie-ner:predict", {"instances": [text, "安南"]})
    v1_entities = [p["entities"] for p in v1["predictions"]]
    assert [json.loads(row) for row in out["data"]] == v1_entities
    meta = _get(app, "/v2/models/ernie-ner")
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"] == [{"name": "entities", "datatype": "BYTES", "shape": [-1]}]


@pytest.mark.slow
def test_matching_answers_a_label_per_pair_over_v1_and_v2() -> None:
    app = _app("text-matching", "ernie-text-matching")
    pairs = [{"text_a": "花呗怎么还款", "text_b": "花呗如何还钱"}, {"text_a": "花呗怎么还款", "text_b": "上海"}]
    code, body = _post(app, "/v1/models/ernie-text-matching:predict", {"instances": pairs})
    assert code == 200 and len(body["predictions"]) == 2
    for prediction in body["predictions"]:
        assert prediction["label"] in ("0", "1") and sum(prediction["probabilities"].values()) == pytest.approx(1.0)
    v2 = {
        "inputs": [
            {"name": "text_a", "datatype": "BYTES", "shape": [2], "data": [p["text_a"] for p in pairs]},
            {"name": "text_b", "datatype": "BYTES", "shape": [2], "data": [p["text_b"] for p in pairs]},
        ]
    }
    code, body = _post(app, "/v2/models/ernie-text-matching/infer", v2)
    assert code == 200
    outputs = {o["name"]: o for o in body["outputs"]}
    assert outputs["label"]["shape"] == [2] and outputs["probabilities"]["shape"] == [2, 2]
    meta = _get(app, "/v2/models/ernie-text-matching")
    assert [i["name"] for i in meta["inputs"]] == ["text_a", "text_b"]
    assert meta["outputs"][1] == {"name": "probabilities", "datatype": "FP32", "shape": [-1, 2]}
    # A text where a pair is expected is a 400 that says what to send.
    code, body = _post(app, "/v1/models/ernie-text-matching:predict", {"instances": ["花呗怎么还款"]})
    assert code == 400 and '"text_a" and "text_b"' in body["error"]


# --------------------------------------------------------------------------- malformed requests per task


class FakeTask:
    """Stands in for Paddle with a task's answer shape, where only the HTTP layer is under test."""

    def __init__(self, task_type: str) -> None:
        self.task_type = task_type
        self.labels = {0: "0", 1: "1"}

    def predict(self, instances: list[Any]) -> list[dict[str, Any]]:
        if self.task_type == "token-classification":
            return [{"entities": []} for _ in instances]
        return [{"label": "1", "probabilities": {"0": 0.2, "1": 0.8}} for _ in instances]


def _fake_app(task_type: str, name: str) -> Any:
    cfg = ServingConfig(max_instances=8, max_text_chars=32, max_request_bytes=2048)
    fake = FakeTask(task_type)
    model = serving.ErnieModel(name, cfg, model_dir=".", classifier_factory=lambda _d, _c: fake)
    model.load()
    return serving.create_app([model], cfg.max_request_bytes)


def _bad_pair_request(rng: random.Random, v1: str, v2: str) -> tuple[str, dict[str, Any]]:
    good = {"text_a": "花呗", "text_b": "借呗"}
    long_text = "长" * 33
    v1_bodies = [
        {"instances": ["花呗怎么还款"]},
        {"instances": [{"text_a": "花呗"}]},
        {"instances": [{**good, "extra": "x"}]},
        {"instances": [{"text_a": 1, "text_b": "借呗"}]},
        {"instances": [{"text_a": "花呗", "text_b": long_text}]},
        {"instances": [good] * 9},
        {"instances": []},
        {"instances": good},
        {"pairs": [good]},
        [good],
    ]
    tensor = {"name": "text_a", "datatype": "BYTES", "shape": [1], "data": ["花呗"]}
    v2_bodies = [
        {"inputs": [tensor]},
        {"inputs": [tensor, {**tensor, "name": "text_b", "shape": [2], "data": ["a", "b"]}]},
        {"inputs": [tensor, {**tensor, "name": "text_c"}]},
        {"inputs": [tensor, {**tensor, "name": "text_b", "datatype": "FP32", "data": [1.0]}]},
        {"inputs": [tensor, {**tensor, "name": "text_b", "data": [long_text]}]},
    ]
    if rng.random() < 0.6:
        return v1, {"json": rng.choice(v1_bodies)}
    return v2, {"json": rng.choice(v2_bodies)}


def _bad_requests(task_type: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(99)
    v1, v2 = f"/v1/models/{name}:predict", f"/v2/models/{name}/infer"
    limits = serving.Limits(max_request_bytes=2048, max_instances=8, max_text_chars=32)
    # Every generic malformed body is malformed for pairs too (none holds {"text_a", "text_b"} objects).
    kinds = list(BAD_REQUEST_KINDS)
    if task_type == "text-matching":
        kinds += [lambda r, _l: _bad_pair_request(r, v1, v2)] * len(kinds)
    out = []
    for _ in range(1100):
        path, kwargs = kinds[rng.randrange(len(kinds))](rng, limits)
        path = path.replace("/v1/models/ernie-sentiment", f"/v1/models/{name}").replace(
            "/v2/models/ernie-sentiment", f"/v2/models/{name}"
        )
        out.append((path, kwargs))
    return out


@pytest.mark.parametrize(
    ("task_type", "name", "good"),
    [
        ("token-classification", "ernie-ner", {"instances": ["江泽民"]}),
        ("text-matching", "ernie-text-matching", {"instances": [{"text_a": "花呗", "text_b": "借呗"}]}),
    ],
)
def test_over_a_thousand_bad_requests_per_task_get_4xx_and_the_server_keeps_serving(
    task_type: str, name: str, good: dict
) -> None:
    app = _fake_app(task_type, name)
    requests = _bad_requests(task_type, name)

    async def go() -> list[tuple[int, str, str]]:
        failures = []
        async with client(app) as c:
            for path, kwargs in requests:
                resp = await c.post(path, **kwargs)
                if not 400 <= resp.status_code < 500 or "error" not in resp.json():
                    failures.append((resp.status_code, path, str(kwargs)[:200]))
            assert (await c.post(f"/v1/models/{name}:predict", json=good)).status_code == 200
        return failures

    assert asyncio.run(go()) == []
