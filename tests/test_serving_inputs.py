"""The model server's input safety: over a thousand malformed or over-limit requests, each answered with a 4xx."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from steps.runtime.serving import model_server as serving
from tests.serving_fixtures import V1, V2, client, fake_app, quiet_kserve  # noqa: F401 — quiet_kserve is autouse

Request = tuple[str, dict[str, Any]]
JUNK: list[Any] = [None, 1, -2.5, True, "", "x", [], {}, [1, 2], {"a": [None]}, [["nested"]], [{"text": "x"}]]

# --------------------------------------------------------------------------- bodies that are not a JSON request


def _malformed_json(rng: random.Random, _limits: serving.Limits) -> Request:
    raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    return rng.choice([V1, V2]), {"content": b"{" + raw, "headers": {"content-type": "application/json"}}


def _over_the_byte_limit(rng: random.Random, limits: serving.Limits) -> Request:
    return V1, {"content": b"x" * (limits.max_request_bytes + 1 + rng.randrange(100))}


def _not_json_content_type(_rng: random.Random, _limits: serving.Limits) -> Request:
    return V1, {"content": b'{"instances": ["x"]}', "headers": {"content-type": "text/plain"}}


# --------------------------------------------------------------------------- V1 bodies of the wrong shape


def _top_level_not_an_object(rng: random.Random, _limits: serving.Limits) -> Request:
    return V1, {"json": rng.choice(JUNK[:-3] + [["a", "b"]])}


def _instances_of_the_wrong_type(rng: random.Random, _limits: serving.Limits) -> Request:
    return V1, {"json": {"instances": rng.choice([None, 1, "text", {}, True])}}


def _non_string_or_nested_items(rng: random.Random, _limits: serving.Limits) -> Request:
    items = ["ok"] * rng.randrange(3) + [rng.choice(JUNK[:2] + JUNK[3:4] + JUNK[6:])]
    rng.shuffle(items)
    return V1, {"json": {"instances": items}}


def _no_instances(_rng: random.Random, _limits: serving.Limits) -> Request:
    return V1, {"json": {"instances": []}}


def _wrong_key(_rng: random.Random, _limits: serving.Limits) -> Request:
    return V1, {"json": {"wrong_key": ["text"]}}


# --------------------------------------------------------------------------- V1 bodies over the limits


def _too_many_instances(rng: random.Random, limits: serving.Limits) -> Request:
    return V1, {"json": {"instances": ["a"] * (limits.max_instances + 1 + rng.randrange(5))}}


def _text_too_long(rng: random.Random, limits: serving.Limits) -> Request:
    return V1, {"json": {"instances": ["长" * (limits.max_text_chars + 1 + rng.randrange(10))]}}


# --------------------------------------------------------------------------- V2 bodies of the wrong shape

BAD_TENSOR_FIELDS: list[tuple[str, Any]] = [
    ("datatype", "FP32"),
    ("datatype", "INT64"),
    ("shape", [3]),
    ("shape", [1, 2]),
    ("data", [1]),
    ("data", [["x"]]),
    ("data", []),
    ("data", [None]),
]
TWO_INPUTS = [
    {"name": "a", "shape": [1], "datatype": "BYTES", "data": ["x"]},
    {"name": "b", "shape": [1], "datatype": "BYTES", "data": ["y"]},
]


def _v2_wrong_datatype_shape_or_data(rng: random.Random, _limits: serving.Limits) -> Request:
    tensor: dict[str, Any] = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["ok"]}
    field, value = rng.choice(BAD_TENSOR_FIELDS)
    tensor[field] = value
    if field == "data" and value == []:
        tensor["shape"] = [0]
    return V2, {"json": {"inputs": [tensor]}}


def _v2_no_inputs_two_inputs_or_not_a_list(rng: random.Random, _limits: serving.Limits) -> Request:
    return V2, {"json": rng.choice([{"inputs": []}, {"inputs": "x"}, {}, {"inputs": TWO_INPUTS}])}


# In the order of the kind drawn for each request (the seed's sequence depends on it).
BAD_REQUEST_KINDS: tuple[Callable[[random.Random, serving.Limits], Request], ...] = (
    _malformed_json,
    _top_level_not_an_object,
    _instances_of_the_wrong_type,
    _non_string_or_nested_items,
    _no_instances,
    _too_many_instances,
    _text_too_long,
    _over_the_byte_limit,
    _wrong_key,
    _v2_wrong_datatype_shape_or_data,
    _v2_no_inputs_two_inputs_or_not_a_list,
    _not_json_content_type,
)


def _bad_requests(rng: random.Random, limits: serving.Limits) -> list[Request]:
    return [BAD_REQUEST_KINDS[rng.randrange(len(BAD_REQUEST_KINDS))](rng, limits) for _ in range(1100)]


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
