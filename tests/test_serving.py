"""The model server: v1/v2 predictions on a tiny exported ERNIE, input safety, metrics, batching."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddle_mlops.config.models import ServingConfig
from paddle_mlops.contracts import (
    SERVING_BATCH_SIZE,
    SERVING_ERRORS_TOTAL,
    SERVING_REQUEST_LATENCY_SECONDS,
    SERVING_REQUESTS_TOTAL,
)
from steps.runtime import serving

NAME = "ernie-sentiment"
V1 = f"/v1/models/{NAME}:predict"
V2 = f"/v2/models/{NAME}/infer"


def make_tiny_export(directory: Path) -> Path:
    """The shared fixture when it exists; else the smallest real export (hidden 32, 1 layer)."""
    try:
        from tests.fixtures_ernie import make_exported_model
    except ImportError:
        pass
    else:
        return make_exported_model(directory)
    import paddle

    from paddle_mlops.config.models import ModelConfig
    from steps.runtime import ernie

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"这个手机质量很好非常满意太差了用两天就坏"]
    vocab_file = directory.parent / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    paddle.seed(0)
    cfg = ModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, max_seq_len=16)
    model = ernie.build_model(cfg, len(vocab), 2)
    return ernie.export(model, ernie.load_tokenizer(vocab_file), {0: "negative", 1: "positive"}, cfg, directory)


@functools.lru_cache(maxsize=1)
def shared_tiny_export() -> Path:
    """One export per test process: exporting costs seconds, and serving never modifies it."""
    return make_tiny_export(Path(tempfile.mkdtemp(prefix="tiny-ernie-")) / "model")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return shared_tiny_export()


class FakeClassifier:
    """Stands in for Paddle where only the HTTP layer is under test; records batch sizes."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def predict(self, texts: list[str]) -> list[dict[str, Any]]:
        self.calls.append(len(texts))
        return [{"label": "positive", "probabilities": {"negative": 0.3, "positive": 0.7}} for _ in texts]


def fake_app(**settings: Any) -> tuple[Any, FakeClassifier]:
    fake = FakeClassifier()
    cfg = ServingConfig(**settings)
    model = serving.ErnieModel(NAME, cfg, model_dir=".", classifier_factory=lambda _d, _c: fake)
    model.load()
    return serving.create_app([model], cfg.max_request_bytes), fake


@pytest.fixture(autouse=True)
def quiet_kserve() -> Any:
    # kserve logs every rejected request with a traceback; thousands of them only slow the tests.
    logger = logging.getLogger("kserve")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def metric(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


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


def _bad_requests(rng: random.Random, limits: serving.Limits) -> list[tuple[str, dict[str, Any]]]:
    junk: list[Any] = [None, 1, -2.5, True, "", "x", [], {}, [1, 2], {"a": [None]}, [["nested"]], [{"text": "x"}]]
    out: list[tuple[str, dict[str, Any]]] = []
    for _ in range(1100):
        kind = rng.randrange(12)
        if kind == 0:  # malformed JSON
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
            out.append((rng.choice([V1, V2]), {"content": b"{" + raw, "headers": {"content-type": "application/json"}}))
        elif kind == 1:  # top level not an object
            out.append((V1, {"json": rng.choice(junk[:-3] + [["a", "b"]])}))
        elif kind == 2:  # instances of the wrong type
            out.append((V1, {"json": {"instances": rng.choice([None, 1, "text", {}, True])}}))
        elif kind == 3:  # non-string or nested items
            items = ["ok"] * rng.randrange(3) + [rng.choice(junk[:2] + junk[3:4] + junk[6:])]
            rng.shuffle(items)
            out.append((V1, {"json": {"instances": items}}))
        elif kind == 4:
            out.append((V1, {"json": {"instances": []}}))
        elif kind == 5:
            out.append((V1, {"json": {"instances": ["a"] * (limits.max_instances + 1 + rng.randrange(5))}}))
        elif kind == 6:
            out.append((V1, {"json": {"instances": ["长" * (limits.max_text_chars + 1 + rng.randrange(10))]}}))
        elif kind == 7:  # body over the byte limit
            out.append((V1, {"content": b"x" * (limits.max_request_bytes + 1 + rng.randrange(100))}))
        elif kind == 8:
            out.append((V1, {"json": {"wrong_key": ["text"]}}))
        elif kind == 9:  # v2: wrong datatype / shape / data
            tensor: dict[str, Any] = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["ok"]}
            field, value = rng.choice(
                [
                    ("datatype", "FP32"),
                    ("datatype", "INT64"),
                    ("shape", [3]),
                    ("shape", [1, 2]),
                    ("data", [1]),
                    ("data", [["x"]]),
                    ("data", []),
                    ("data", [None]),
                ]
            )
            tensor[field] = value
            if field == "data" and value == []:
                tensor["shape"] = [0]
            out.append((V2, {"json": {"inputs": [tensor]}}))
        elif kind == 10:  # v2: no inputs, two inputs, not a list
            out.append(
                (
                    V2,
                    {
                        "json": rng.choice(
                            [
                                {"inputs": []},
                                {"inputs": "x"},
                                {},
                                {
                                    "inputs": [
                                        {"name": "a", "shape": [1], "datatype": "BYTES", "data": ["x"]},
                                        {"name": "b", "shape": [1], "datatype": "BYTES", "data": ["y"]},
                                    ]
                                },
                            ]
                        )
                    },
                )
            )
        else:  # v1 body sent with a non-JSON content type
            out.append((V1, {"content": b'{"instances": ["x"]}', "headers": {"content-type": "text/plain"}}))
    return out


def test_over_a_thousand_bad_requests_get_4xx_and_the_server_keeps_serving() -> None:
    app, _ = fake_app(max_instances=8, max_text_chars=32, max_request_bytes=2048)
    limits = serving.Limits(max_request_bytes=2048, max_instances=8, max_text_chars=32)
    requests = _bad_requests(random.Random(1234), limits)
    assert len(requests) >= 1000

    async def go() -> list[tuple[int, str, str]]:
        failures = []
        async with client(app) as c:
            for path, kwargs in requests:
                resp = await c.post(path, **kwargs)
                if not 400 <= resp.status_code < 500:
                    failures.append((resp.status_code, path, str(kwargs)[:200]))
                else:
                    assert "error" in resp.json(), resp.text
            good = await c.post(V1, json={"instances": ["好"]})
            assert good.status_code == 200
        return failures

    assert asyncio.run(go()) == []


def test_metrics_expose_documented_names_with_sane_values() -> None:
    app, _ = fake_app()

    async def go() -> str:
        async with client(app) as c:
            for _ in range(3):
                assert (await c.post(V1, json={"instances": ["a", "b"]})).status_code == 200
            assert (await c.post(V1, json={"instances": 5})).status_code == 400
            return (await c.get("/metrics")).text

    before = asyncio.run(_scrape(app))
    after = asyncio.run(go())
    assert (
        metric(after, SERVING_REQUESTS_TOTAL, protocol="v1", code="200")
        - metric(before, SERVING_REQUESTS_TOTAL, protocol="v1", code="200")
        == 3
    )
    assert metric(after, SERVING_REQUESTS_TOTAL, protocol="v1", code="400") >= 1
    assert metric(after, SERVING_ERRORS_TOTAL, reason="invalid_input") >= 1
    assert metric(after, f"{SERVING_REQUEST_LATENCY_SECONDS}_count", protocol="v1") >= 4
    assert metric(after, f"{SERVING_REQUEST_LATENCY_SECONDS}_sum", protocol="v1") > 0
    assert metric(after, f"{SERVING_BATCH_SIZE}_sum") - metric(before, f"{SERVING_BATCH_SIZE}_sum") == 6


async def _scrape(app: Any) -> str:
    async with client(app) as c:
        return (await c.get("/metrics")).text


def test_concurrent_requests_are_merged_into_batches() -> None:
    app, fake = fake_app(max_batch_size=8, max_wait_ms=200)

    async def go() -> list[httpx.Response]:
        async with client(app) as c:
            return await asyncio.gather(*[c.post(V1, json={"instances": [f"t{i}"]}) for i in range(8)])

    before = asyncio.run(_scrape(app))
    responses = asyncio.run(go())
    after = asyncio.run(_scrape(app))
    assert all(r.status_code == 200 and len(r.json()["predictions"]) == 1 for r in responses)
    assert max(fake.calls) > 1 and sum(fake.calls) == 8
    assert all(size <= 8 for size in fake.calls)
    # The histogram saw fewer model calls than requests: some batch held more than one request.
    calls = metric(after, f"{SERVING_BATCH_SIZE}_count") - metric(before, f"{SERVING_BATCH_SIZE}_count")
    assert calls == len(fake.calls) < 8


def test_batches_never_exceed_max_batch_size_and_results_route_back() -> None:
    seen: list[list[str]] = []

    def run(texts: list[str]) -> list[dict[str, Any]]:
        seen.append(texts)
        return [{"label": t, "probabilities": {t: 1.0}} for t in texts]

    batcher = serving.DynamicBatcher(run, max_batch_size=4, max_wait_ms=50)

    async def go() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*[batcher.submit([f"{i}a", f"{i}b", f"{i}c"][: 1 + i % 3]) for i in range(10)])

    results = asyncio.run(go())
    for i, res in enumerate(results):
        assert [r["label"] for r in res] == [f"{i}a", f"{i}b", f"{i}c"][: 1 + i % 3]
    assert all(len(batch) <= 4 for batch in seen)


def test_model_failure_is_a_5xx_and_the_next_request_succeeds() -> None:
    calls = {"n": 0}

    class Flaky(FakeClassifier):
        def predict(self, texts: list[str]) -> list[dict[str, Any]]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("boom")
            return super().predict(texts)

    cfg = ServingConfig()
    model = serving.ErnieModel(NAME, cfg, model_dir=".", classifier_factory=lambda _d, _c: Flaky())
    model.load()
    app = serving.create_app([model], cfg.max_request_bytes)

    async def go() -> tuple[int, int]:
        async with client(app) as c:
            first = await c.post(V1, json={"instances": ["a"]})
            second = await c.post(V1, json={"instances": ["a"]})
            return first.status_code, second.status_code

    assert asyncio.run(go()) == (500, 200)


def test_health_endpoints() -> None:
    app, _ = fake_app()

    async def go() -> list[int]:
        async with client(app) as c:
            return [
                (await c.get(p)).status_code
                for p in ("/v2/health/live", "/v2/health/ready", f"/v1/models/{NAME}", "/v1/models/nope")
            ]

    assert asyncio.run(go()) == [200, 200, 200, 404]


def test_v1_predict_route_keeps_kserve_answers_for_unknown_and_not_ready_models() -> None:
    fake = FakeClassifier()
    cfg = ServingConfig()
    ready = serving.ErnieModel(NAME, cfg, model_dir=".", classifier_factory=lambda _d, _c: fake)
    ready.load()
    loading = serving.ErnieModel("loading", cfg, model_dir=".", classifier_factory=lambda _d, _c: fake)
    app = serving.create_app([ready, loading], cfg.max_request_bytes)

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


def test_v1_fast_path_answers_as_kserve_does_and_times_kserve_stages_others_go_to_kserve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kserve
    from kserve.protocol.dataplane import DataPlane

    through_dataplane: list[str] = []
    infer = DataPlane.infer

    async def counting_infer(self: Any, model_name: str, *args: Any, **kwargs: Any) -> Any:
        through_dataplane.append(model_name)
        return await infer(self, model_name, *args, **kwargs)

    monkeypatch.setattr(DataPlane, "infer", counting_infer)

    class Echo(kserve.Model):  # not ours: kserve's own V1 handler must serve it
        def __init__(self) -> None:
            super().__init__("echo")
            self.ready = True

        def predict(self, payload: dict, headers: dict[str, str] | None = None) -> dict:
            return {"predictions": payload["instances"]}

    fake = FakeClassifier()
    cfg = ServingConfig()
    ours = serving.ErnieModel(NAME, cfg, model_dir=".", classifier_factory=lambda _d, _c: fake)
    ours.load()
    app = serving.create_app([ours, Echo()], cfg.max_request_bytes)
    cloudevent = {
        "ce-specversion": "1.0",
        "ce-type": "predict",
        "ce-source": "test",
        "ce-id": "1",
        "content-type": "application/json",
    }

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response, str]:
        async with client(app) as c:
            fast = await c.post(V1, json={"instances": ["好", "坏"]})
            charset = await c.post(
                V1,
                content=json.dumps({"instances": ["好"]}),
                headers={"content-type": "application/json; charset=utf-8"},
            )
            assert charset.status_code == 200, charset.text
            via_kserve = await c.post(V1, content=json.dumps({"instances": ["好", "坏"]}), headers=cloudevent)
            echo = await c.post("/v1/models/echo:predict", json={"instances": ["x"]})
            return fast, via_kserve, echo, (await c.get("/metrics")).text

    before = asyncio.run(_scrape(app))
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


def test_serve_cli_bad_model_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from steps import serve

    assert serve.main(["--model-dir", str(tmp_path), "--port", "0"]) == 2
    assert "not a model exported by the train step" in capsys.readouterr().err
    assert serve.main(["--port", "0"]) == 2


def test_a_lone_request_runs_without_waiting_for_companions() -> None:
    # max_wait_ms only pays when others are queued; an idle server must not add it to latency.
    batcher = serving.DynamicBatcher(lambda texts: [{"label": t} for t in texts], max_batch_size=8, max_wait_ms=2000)

    async def go() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await batcher.submit(["only"])
        return loop.time() - start

    assert asyncio.run(go()) < 1.0


def test_listening_socket_disables_nagle() -> None:
    # Without TCP_NODELAY a keep-alive response's body waits for the client's delayed ACK (~40 ms).
    import socket

    sock = serving.bind_socket("127.0.0.1", 0)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def recording_batcher(max_batch_size: int, max_wait_ms: float) -> tuple[serving.DynamicBatcher, list[int]]:
    """A batcher whose model records the size of every call."""
    seen: list[int] = []

    def run(texts: list[str]) -> list[dict[str, Any]]:
        seen.append(len(texts))
        return [{"label": t} for t in texts]

    return serving.DynamicBatcher(run, max_batch_size=max_batch_size, max_wait_ms=max_wait_ms), seen


async def full_batch_then_staggered_wave(batcher: serving.DynamicBatcher, size: int, spacing_s: float) -> None:
    """One full batch of `size` requests, then a wave of `size` sent `spacing_s` apart."""
    await asyncio.gather(*[batcher.submit([f"a{i}"]) for i in range(size)])

    async def later(i: int) -> None:
        await asyncio.sleep(spacing_s * i)
        await batcher.submit([f"b{i}"])

    await asyncio.gather(*[later(i) for i in range(size)])


def test_a_staggered_wave_after_a_full_batch_is_gathered_again_and_a_lone_client_stops_waiting() -> None:
    # 16 clients get their answers together and send their next requests a few ms apart. The
    # batcher must gather that wave into one batch (not run the first request alone and the rest
    # after it), and once the load is gone a lone client must stop paying max_wait_ms.
    batcher, seen = recording_batcher(max_batch_size=8, max_wait_ms=400)

    async def go() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        await full_batch_then_staggered_wave(batcher, 8, 0.01)
        start = loop.time()
        await batcher.submit(["lone-1"])  # waits up to max_wait_ms for companions that never come
        first_lone = loop.time() - start
        start = loop.time()
        await batcher.submit(["lone-2"])  # the previous batch held one text: no waiting any more
        return first_lone, loop.time() - start

    first_lone, second_lone = asyncio.run(go())
    assert seen == [8, 8, 1, 1]
    assert first_lone < 1.0 and second_lone < 0.2


def test_a_wave_that_arrives_slower_than_max_wait_ms_is_still_one_batch_while_requests_keep_coming() -> None:
    # On a busy CPU the 16 requests of a wave can spread over more than max_wait_ms; the wait
    # restarts with each arrival, so the wave is not split into two model calls.
    batcher, seen = recording_batcher(max_batch_size=6, max_wait_ms=100)
    asyncio.run(full_batch_then_staggered_wave(batcher, 6, 0.04))  # 200 ms first to last: twice max_wait_ms
    assert seen == [6, 6]


def test_a_lone_request_runs_on_the_loop_thread_and_batches_on_the_model_thread() -> None:
    import threading

    threads: list[tuple[int, str]] = []

    def run(texts: list[str]) -> list[dict[str, Any]]:
        threads.append((len(texts), threading.current_thread().name))
        return [{"label": t} for t in texts]

    batcher = serving.DynamicBatcher(run, max_batch_size=8, max_wait_ms=50)

    async def go() -> str:
        await batcher.submit(["lone"])
        await asyncio.gather(*[batcher.submit([f"t{i}"]) for i in range(4)])
        return threading.current_thread().name

    loop_thread = asyncio.run(go())
    assert threads[0] == (1, loop_thread)
    assert threads[1][0] == 4 and threads[1][1].startswith("model")
    # Work that must match the batches' conditions runs on that same model thread.
    assert batcher.run_on_model_thread(lambda n: (n, threading.current_thread().name), 7).result(5) == (
        7,
        threads[1][1],
    )


def test_serving_inline_lone_requests_false_keeps_every_model_call_off_the_loop_thread() -> None:
    import threading

    threads: list[str] = []

    class Recording:
        def predict(self, texts: list[str]) -> list[dict[str, Any]]:
            threads.append(threading.current_thread().name)
            return [{"label": "positive", "probabilities": {"positive": 1.0}} for _ in texts]

    cfg = ServingConfig(inline_lone_requests=False)
    model = serving.ErnieModel("m", cfg, model_dir="unused", classifier_factory=lambda _d, _c: Recording())
    model.load()

    async def go() -> None:
        await model.predict(["lone"])
        await model.predict(["again"])

    asyncio.run(go())
    assert len(threads) == 2 and all(name.startswith("model") for name in threads)


@pytest.mark.parametrize("spin_ms", [3, None])
def test_every_thread_that_runs_the_model_sets_serving_openmp_spin_ms(spin_ms: int | None) -> None:
    import threading

    import paddle  # noqa: F401 — loads Paddle's Intel OpenMP runtime, as the real classifier does

    from steps.runtime import openmp

    seen: list[tuple[str, int | None]] = []

    class Recording:
        def predict(self, texts: list[str]) -> list[dict[str, Any]]:
            seen.append((threading.current_thread().name, openmp.get_blocktime()))
            return [{"label": "positive", "probabilities": {"positive": 1.0}} for _ in texts]

    cfg = ServingConfig(openmp_spin_ms=spin_ms, max_wait_ms=50)
    model = serving.ErnieModel("m", cfg, model_dir="unused", classifier_factory=lambda _d, _c: Recording())
    model.load()

    async def go() -> None:
        await model.predict(["lone"])  # inline, on the loop thread
        await asyncio.gather(*(model.predict([f"t{i}"]) for i in range(4)))  # a batch, on the model thread

    def fresh_thread_blocktime() -> int | None:
        plain: list[int | None] = []
        thread = threading.Thread(target=lambda: plain.append(openmp.get_blocktime()))
        thread.start()
        thread.join()
        return plain[0]

    runner = threading.Thread(target=lambda: asyncio.run(go()), name="loop")
    runner.start()
    runner.join()
    assert openmp.loaded_runtime() is not None
    assert [name.startswith("model") for name, _ in seen] == [False, True]
    if spin_ms is None:  # the runtime's own setting on both, as on any other new thread
        assert {bt for _, bt in seen} == {fresh_thread_blocktime()}
    else:
        assert [bt for _, bt in seen] == [spin_ms, spin_ms]


def test_openmp_runtime_is_found_in_the_process_maps_or_reported_absent(tmp_path: Path) -> None:
    from steps.runtime import openmp

    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /opt/paddle/libs/libiomp5.so\n"
        "7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0 [stack]\n"
    )
    assert openmp.loaded_runtime(maps) == "/opt/paddle/libs/libiomp5.so"
    maps.write_text("7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n")
    assert openmp.loaded_runtime(maps) is None
    assert openmp.loaded_runtime(tmp_path / "absent") is None
