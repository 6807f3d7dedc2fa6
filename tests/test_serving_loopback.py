"""Served speed (#32 item 3): each classifier measured through the real serving stack on a loopback port under
concurrent clients, which is what the engine selection ranks by; a variant whose speed comes from batching wins
there even where its per-call figure is worse, and one that fails when served is not ranked."""

from __future__ import annotations

import time
from typing import Any

from paddle_mlops_core.config import load_config
from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving.engine_selection import RANKED_BY_IN_PROCESS, RANKED_BY_SERVED, Measured, choose, ranked_by
from steps.runtime.serving.model_server.loopback import served_speeds
from tests.fixtures_ernie import CONFIG
from tests.serving_fixtures import quiet_kserve  # noqa: F401 — autouse


class Sleeper:
    """A classifier whose call takes `per_call` + `per_text` x texts seconds (the GIL released, as engines do)."""

    def __init__(self, per_call: float, per_text: float) -> None:
        self.per_call, self.per_text = per_call, per_text
        self.sizes: list[int] = []

    def predict(self, instances: list[Any]) -> list[dict[str, Any]]:
        self.sizes.append(len(instances))
        time.sleep(self.per_call + self.per_text * len(instances))
        return [{"label": "positive", "probabilities": {"positive": 1.0}} for _ in instances]


class Broken(Sleeper):
    def predict(self, instances: list[Any]) -> list[dict[str, Any]]:
        raise ValueError("this engine fails at batch size > 1")


def test_served_speed_goes_through_the_batching_server_and_ranks_what_clients_get() -> None:
    per_call = Sleeper(per_call=0.012, per_text=0.0)  # slow alone, fast in batches
    per_text = Sleeper(per_call=0.0, per_text=0.003)  # 4x faster at batch 1, 1/4 as fast at batch 16
    broken = Broken(0, 0)
    started = time.monotonic()
    speeds = served_speeds(
        {"per-call": per_call, "per-text": per_text, "broken": broken},
        ServingConfig.model_validate({"cpu_threads": 1}),
        ["很好"] * 32,
        clients=16,
        rounds=3,
        pause=0.0,
        budget_s=30,
    )
    assert time.monotonic() - started < 30
    assert len(speeds["per-call"].per_round) == len(speeds["per-text"].per_round) == 3
    # The dynamic batcher gathered the 16 clients' requests into batches: the server, not a loop of calls.
    assert max(per_call.sizes) == 16 and sum(per_call.sizes) == 4 * 32  # one untimed round, then three
    fast, slow = speeds["per-call"].texts_per_s, speeds["per-text"].texts_per_s
    assert fast is not None and slow is not None and fast > 2 * slow
    assert speeds["broken"].texts_per_s is None and "answered 500" in speeds["broken"].error


def test_the_budget_bounds_the_rounds_and_every_variant_gets_one() -> None:
    slow = Sleeper(per_call=0.05, per_text=0.0)
    speeds = served_speeds(
        {"a": slow, "b": Sleeper(0.05, 0.0)},
        ServingConfig.model_validate({"cpu_threads": 1}),
        ["很好"],
        clients=4,
        rounds=50,
        pause=0.0,
        budget_s=0.0,
    )
    assert [len(s.per_round) for s in speeds.values()] == [1, 1]


def _table(rows: dict[str, tuple[float, float, float | None]]) -> dict[str, Measured]:
    """variant -> (metric, in-process batch texts/s, served texts/s)."""
    return {
        name: Measured(name, "measured", metric=m, batch_texts_per_s=batch, served_texts_per_s=served)
        for name, (m, batch, served) in rows.items()
    }


def test_the_selection_ranks_by_served_speed_and_says_so() -> None:
    cfg = load_config(CONFIG, "local", [])
    # onnx-int8 is fastest in process, openvino-bf16 fastest served (the HTTP work reorders them).
    table = _table(
        {
            "paddle-fp32": (0.812, 35.0, 34.0),
            "onnx-int8": (0.812, 110.0, 84.4),
            "openvino-bf16": (0.812, 98.0, 95.1),
            "paddle-bf16": (0.700, 300.0, 290.0),  # refused on its metric, however fast
        }
    )
    selected, ranking, why = choose(cfg, table)
    assert selected == "openvino-bf16" and ranking == ["openvino-bf16", "onnx-int8", "paddle-fp32"]
    assert ranked_by(table) == RANKED_BY_SERVED and "fastest served (95.1 texts/s, 16 clients)" in why
    # A variant that failed when served is never chosen, however fast it was in process.
    broken = _table({"paddle-fp32": (0.812, 35.0, 34.0), "onnx-int8": (0.812, 110.0, None)})
    broken["onnx-int8"].status, broken["onnx-int8"].reason = "unavailable", "failed when served: answered 500"
    assert choose(cfg, broken)[:2] == ("paddle-fp32", ["paddle-fp32"]) and broken["onnx-int8"].status == "unavailable"
    # Without a served figure for every allowed variant the in-process one ranks, and the table says so.
    table["onnx-int8"].served_texts_per_s = None
    selected, _, why = choose(cfg, table)
    assert selected == "onnx-int8" and ranked_by(table) == RANKED_BY_IN_PROCESS and "fastest at batch 16" in why
