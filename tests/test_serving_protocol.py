"""The model server's predict routes: V1 and V2 on a tiny real export, and the V1 fast path answering as KServe does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddle_mlops_core.config.serving import ServingConfig
from paddle_mlops_core.contracts import SERVING_REQUESTS_TOTAL
from steps.runtime.serving import model_server as serving
from tests.serving_fixtures import (  # noqa: F401 — quiet_kserve is autouse
    NAME,
    V1,
    V2,
    FakeClassifier,
    app_for,
    client,
    fake_model,
    metric,
    quiet_kserve,
    scrape,
    shared_tiny_export,
)

# A binary-mode CloudEvent: kserve's DataPlane answers it with a CloudEvent.
CLOUDEVENT_HEADERS = {
    "ce-specversion": "1.0",
    "ce-type": "predict",
    "ce-source": "test",
    "ce-id": "1",
    "content-type": "application/json",
}


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return shared_tiny_export()


@pytest.mark.slow
def test_v1_and_v2_predict_on_tiny_exported_model(tiny_model_dir: Path) -> None:
    cfg = ServingConfig()
    model = serving.ErnieModel(NAME, cfg, model_dir=str(tiny_model_dir))
    model.load()
    app = serving.create_app([model], cfg.max_request_bytes)
    texts = ["这个手机质量很好", "太差了"]

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with client(app) as c:
            v1 = await c.post(V1, json={"instances": texts})
            v2 = await c.post(V2, json={"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": texts}]})
            ready = await c.get(f"/v1/models/{NAME}")
            return v1, v2, ready

    v1, v2, ready = asyncio.run(go())
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert v1.status_code == 200, v1.text
    preds = v1.json()["predictions"]
    assert len(preds) == 2
    for pred in preds:
        assert set(pred["probabilities"]) == {"negative", "positive"}
        assert pred["label"] == max(pred["probabilities"], key=pred["probabilities"].get)
        assert sum(pred["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    assert v2.status_code == 200, v2.text
    outputs = {o["name"]: o for o in v2.json()["outputs"]}
    assert outputs["label"]["datatype"] == "BYTES" and outputs["label"]["data"] == [p["label"] for p in preds]
    probs = outputs["probabilities"]
    assert probs["datatype"] == "FP32" and probs["shape"] == [2, 2]
    labels = json.loads(probs["parameters"]["labels"])
    for i, pred in enumerate(preds):
        for j, label in enumerate(labels):
            assert probs["data"][i * 2 + j] == pytest.approx(pred["probabilities"][label], abs=1e-5)


def test_v1_predict_route_keeps_kserve_answers_for_unknown_and_not_ready_models() -> None:
    fake = FakeClassifier()
    ready = fake_model(classifier=fake)
    ready.load()
    app = app_for(ready, fake_model("loading", classifier=fake))

    async def go() -> list[httpx.Response]:
        async with client(app) as c:
            return [
                await c.post(f"/v1/models/{name}:predict", json={"instances": ["好"]})
                for name in ("nope", "loading", NAME)
            ]

    unknown, not_ready, ok = asyncio.run(go())
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
    assert not_ready.status_code == 503 and "loading" in not_ready.json()["error"]
    assert ok.status_code == 200 and ok.json()["predictions"][0]["label"] == "positive"
    assert fake.calls == [1]


def record_dataplane_infer(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the models whose requests go through kserve's DataPlane from now on."""
    from kserve.protocol.dataplane import DataPlane

    through_dataplane: list[str] = []
    infer = DataPlane.infer

    async def counting_infer(self: Any, model_name: str, *args: Any, **kwargs: Any) -> Any:
        through_dataplane.append(model_name)
        return await infer(self, model_name, *args, **kwargs)

    monkeypatch.setattr(DataPlane, "infer", counting_infer)
    return through_dataplane


def echo_model() -> Any:
    """A plain `kserve.Model` that echoes its instances: not ours, so kserve's own V1 handler must serve it."""
    import kserve

    class Echo(kserve.Model):
        def __init__(self) -> None:
            super().__init__("echo")
            self.ready = True

        def predict(self, payload: dict, headers: dict[str, str] | None = None) -> dict:
            return {"predictions": payload["instances"]}

    return Echo()


def test_v1_fast_path_answers_as_kserve_does_and_times_kserve_stages_others_go_to_kserve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    through_dataplane = record_dataplane_infer(monkeypatch)
    fake = FakeClassifier()
    ours = fake_model(classifier=fake)
    ours.load()
    app = app_for(ours, echo_model())

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response, str]:
        async with client(app) as c:
            fast = await c.post(V1, json={"instances": ["好", "坏"]})
            charset = await c.post(
                V1,
                content=json.dumps({"instances": ["好"]}),
                headers={"content-type": "application/json; charset=utf-8"},
            )
            assert charset.status_code == 200, charset.text
            via_kserve = await c.post(V1, content=json.dumps({"instances": ["好", "坏"]}), headers=CLOUDEVENT_HEADERS)
            echo = await c.post("/v1/models/echo:predict", json={"instances": ["x"]})
            return fast, via_kserve, echo, (await c.get("/metrics")).text

    before = asyncio.run(scrape(app))
    fast, via_kserve, echo, after = asyncio.run(go())
    assert fast.status_code == 200 and fast.headers["content-type"] == "application/json"
    # a binary CloudEvent goes through kserve's DataPlane (it answers with a CloudEvent), to the same model
    assert via_kserve.status_code == 200 and via_kserve.headers.get("ce-specversion") == "1.0"
    assert json.loads(via_kserve.content)["predictions"] == fast.json()["predictions"]
    assert len(fast.json()["predictions"]) == 2 and fake.calls == [2, 1, 2]
    assert echo.status_code == 200 and echo.json() == {"predictions": ["x"]}
    for stage in ("request_preprocess_seconds", "request_predict_seconds", "request_postprocess_seconds"):
        assert metric(after, f"{stage}_count", model_name=NAME) - metric(before, f"{stage}_count", model_name=NAME) == 3
    assert metric(after, "request_predict_seconds_count", model_name="echo") >= 1
    assert through_dataplane == [NAME, "echo"]  # the plain JSON requests to ours skipped kserve's DataPlane


@pytest.mark.slow
def test_v2_metadata_declares_the_tensors_and_version_a_generic_client_needs(tiny_model_dir: Path, tmp_path) -> None:
    """A generic Open Inference Protocol client reads `GET /v2/models/{name}` and builds its request from it."""
    from steps.runtime.storage import objectstore

    store = tmp_path / "store"
    uri = objectstore.publish(tiny_model_dir, str(store), NAME, "v-meta-1", progress=False).model_uri
    cfg = ServingConfig()
    model = serving.ErnieModel(NAME, cfg, model_uri=uri)
    model.load()
    app = serving.create_app([model], cfg.max_request_bytes)

    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with client(app) as c:
            meta = await c.get(f"/v2/models/{NAME}")
            (tensor,) = meta.json()["inputs"]
            texts = ["物流很快，包装完好", "客服态度很差"]
            rows = [len(texts) if d == -1 else d for d in tensor["shape"]]
            body = {"inputs": [{"name": tensor["name"], "datatype": tensor["datatype"], "shape": rows, "data": texts}]}
            return meta, await c.post(V2, json=body)

    meta, answer = asyncio.run(go())
    assert meta.status_code == 200, meta.text
    assert meta.json() == {
        "name": NAME,
        "versions": ["v-meta-1"],
        "platform": "paddle_inference:paddle-fp32",  # framework, then the engine variant serving (no engine.json)
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [
            {"name": "label", "datatype": "BYTES", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 2]},
        ],
    }
    assert answer.status_code == 200, answer.text
    declared = {(t["name"], t["datatype"]) for t in meta.json()["outputs"]}
    assert {(o["name"], o["datatype"]) for o in answer.json()["outputs"]} == declared
    probabilities = next(o for o in answer.json()["outputs"] if o["name"] == "probabilities")
    assert probabilities["shape"] == [2, meta.json()["outputs"][1]["shape"][1]]


def test_v2_metadata_of_an_unpublished_export_has_no_version() -> None:
    model = fake_model()
    model.load()

    async def go() -> httpx.Response:
        async with client(app_for(model)) as c:
            return await c.get(f"/v2/models/{NAME}")

    meta = asyncio.run(go()).json()
    assert "versions" not in meta or meta["versions"] is None
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"][1] == {"name": "probabilities", "datatype": "FP32", "shape": [-1, -1]}


def test_v1_fast_path_runs_ahead_of_fastapi_and_answers_errors_with_the_apps_handlers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Our models' JSON V1 requests skip FastAPI's middleware and routing (each cold layer costs every request
    after a model call, docs/benchmarks.md serving item 13); errors get the app's answers all the same."""
    from fastapi import FastAPI

    through_fastapi: list[str] = []
    call = FastAPI.__call__

    async def counting_call(self: Any, scope: dict, receive: Any, send: Any) -> None:
        through_fastapi.append(scope.get("path", ""))
        await call(self, scope, receive, send)

    monkeypatch.setattr(FastAPI, "__call__", counting_call)
    fake = FakeClassifier()
    ours = fake_model(classifier=fake)
    ours.load()
    app = app_for(ours, echo_model(), fake_model("loading", classifier=fake))

    async def go() -> dict[str, httpx.Response]:
        async with client(app) as c:
            return {
                "ok": await c.post(V1, json={"instances": ["好"]}),
                "malformed": await c.post(V1, content=b'{"instances": [', headers={"content-type": "application/json"}),
                "not-a-list": await c.post(V1, json={"instances": 5}),
                "not-ready": await c.post("/v1/models/loading:predict", json={"instances": ["好"]}),
                "echo-malformed": await c.post(
                    "/v1/models/echo:predict", content=b'{"instances": [', headers={"content-type": "application/json"}
                ),
            }

    answers = asyncio.run(go())
    assert answers["ok"].status_code == 200 and fake.calls == [1]
    assert answers["malformed"].status_code == answers["echo-malformed"].status_code == 400
    assert "Unrecognized request format" in answers["malformed"].json()["error"]
    assert answers["not-a-list"].status_code == 400 and "error" in answers["not-a-list"].json()
    assert answers["not-ready"].status_code == 503 and "loading" in answers["not-ready"].json()["error"]
    # Only kserve's own model went through the FastAPI app.
    assert through_fastapi == ["/v1/models/echo:predict"]


def test_v2_versioned_paths_serve_the_published_version_and_name_it_for_any_other() -> None:
    """kserve 0.21 answers every `/versions/{v}` path 501; the version our metadata declares must be addressable."""
    import kserve

    fake = FakeClassifier()
    cfg = ServingConfig()
    published = serving.ErnieModel(
        NAME, cfg, model_uri="s3://models/ernie-sentiment/v7", model_dir=".", classifier_factory=lambda _d, _c: fake
    )
    unpublished = fake_model("dev", classifier=fake)
    for model in (published, unpublished):
        model.load()

    class Plain(kserve.Model):  # not ours: kserve's answer stays
        def __init__(self) -> None:
            super().__init__("plain")
            self.ready = True

    app = app_for(published, unpublished, Plain())
    tensor = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["好"]}

    async def go() -> dict[str, httpx.Response]:
        async with client(app) as c:
            base = f"/v2/models/{NAME}"
            answers = {
                "meta": await c.get(base),
                "meta@v7": await c.get(f"{base}/versions/v7"),
                "ready@v7": await c.get(f"{base}/versions/v7/ready"),
                "infer": await c.post(f"{base}/infer", json={"inputs": [tensor]}),
                "infer@v7": await c.post(f"{base}/versions/v7/infer", json={"inputs": [tensor]}),
                "meta@v6": await c.get(f"{base}/versions/v6"),
                "infer@v6": await c.post(f"{base}/versions/v6/infer", json={"inputs": [tensor]}),
                "dev@v1": await c.get("/v2/models/dev/versions/v1"),
                "plain@v1": await c.get("/v2/models/plain/versions/v1"),
            }
            # The guard records each request on the loop's next turn (guard.py); ASGITransport need not yield to the
            # loop between requests, so let it turn before scraping.
            await asyncio.sleep(0)
            return {**answers, "metrics": await c.get("/metrics")}

    answers = asyncio.run(go())
    assert answers["meta"].json()["versions"] == ["v7"]
    assert answers["meta@v7"].status_code == 200 and answers["meta@v7"].json() == answers["meta"].json()
    assert answers["ready@v7"].status_code == 200 and answers["ready@v7"].json()["ready"] is True
    assert answers["infer@v7"].status_code == 200, answers["infer@v7"].text
    assert answers["infer@v7"].json()["outputs"] == answers["infer"].json()["outputs"]
    assert fake.calls == [1, 1]  # the other versions never reached the model
    for key in ("meta@v6", "infer@v6"):
        assert answers[key].status_code == 404 and "serves version v7" in answers[key].json()["error"]
    assert answers["dev@v1"].status_code == 404 and "no version" in answers["dev@v1"].json()["error"]
    assert answers["plain@v1"].status_code == 501
    # The versioned infers count as V2 requests, like the unversioned one.
    assert metric(answers["metrics"].text, SERVING_REQUESTS_TOTAL, protocol="v2", code="200") >= 2
