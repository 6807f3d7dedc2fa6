"""The model server as a whole: metrics, health endpoints, recovery after a model failure, the CLI and its socket."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops_core.contracts import (
    SERVING_BATCH_SIZE,
    SERVING_ERRORS_TOTAL,
    SERVING_REQUEST_LATENCY_SECONDS,
    SERVING_REQUESTS_TOTAL,
)
from steps.runtime.serving import model_server as serving
from tests.serving_fixtures import (  # noqa: F401 — quiet_kserve is autouse
    NAME,
    V1,
    FakeClassifier,
    app_for,
    client,
    fake_app,
    fake_model,
    metric,
    quiet_kserve,
    scrape,
)


def test_metrics_expose_documented_names_with_sane_values() -> None:
    app, _ = fake_app()

    async def go() -> None:
        async with client(app) as c:
            for _ in range(3):
                assert (await c.post(V1, json={"instances": ["a", "b"]})).status_code == 200
            assert (await c.post(V1, json={"instances": 5})).status_code == 400

    before = asyncio.run(scrape(app))
    asyncio.run(go())
    # Scraped in a later turn of the loop than the last answer: records land once the answering turn is over (serving
    # item 15). Over httpx's in-process transport a scrape could come in that same turn; over a socket it never does.
    after = asyncio.run(scrape(app))
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


def test_a_batch_answers_every_request_before_recording_any(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's answers all resume in one turn of the loop; each request's metrics (the guard's counters and latency,
    kserve's stage histograms) are recorded after every answer of that turn is written, not between them (serving
    item 15), and none is lost."""
    from steps.runtime.serving.model_server import guard, v1_predict

    app, fake = fake_app(max_batch_size=8, max_wait_ms=200, inline_lone_requests=False)
    events: list[str] = []
    record, observe = guard._record, v1_predict.V1Predict._observe
    monkeypatch.setattr(guard, "_record", lambda *a: (events.append("record"), record(*a)))
    monkeypatch.setattr(v1_predict.V1Predict, "_observe", lambda self, *a: (events.append("stages"), observe(self, *a)))

    async def request(i: int) -> None:
        body = b'{"instances": ["t%d"]}' % i
        scope = {
            "type": "http",
            "method": "POST",
            "path": V1,
            "raw_path": V1.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.Event().wait()  # no disconnect while the answer is pending
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                events.append("answer")
            else:
                assert message["status"] == 200

        await app(scope, receive, send)

    async def go() -> None:
        await asyncio.gather(*(request(i) for i in range(4)))
        await asyncio.sleep(0)

    asyncio.run(go())
    assert fake.calls == [4]
    assert events[:4] == ["answer"] * 4
    assert sorted(events[4:]) == ["record"] * 4 + ["stages"] * 4


def test_model_failure_is_a_5xx_and_the_next_request_succeeds() -> None:
    calls = {"n": 0}

    class Flaky(FakeClassifier):
        def predict(self, texts: list[str]) -> list[dict[str, Any]]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("boom")
            return super().predict(texts)

    model = fake_model(classifier=Flaky())
    model.load()
    app = app_for(model)

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


def test_serve_cli_bad_model_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from steps import serve

    assert serve.main(["--model-dir", str(tmp_path), "--port", "0"]) == 2
    assert "not a model exported by the train step" in capsys.readouterr().err
    assert serve.main(["--port", "0"]) == 2


def test_listening_socket_disables_nagle() -> None:
    # Without TCP_NODELAY a keep-alive response's body waits for the client's delayed ACK (~40 ms).
    sock = serving.bind_socket("127.0.0.1", 0)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()
