"""What the model-server tests share: routes, a tiny real export, a fake classifier, an in-process client, metrics.

The test modules import `quiet_kserve` so that it runs (autouse) for every test in them.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving import model_server as serving
from tests.fixtures_ernie import make_exported_model

NAME = "ernie-sentiment"
V1 = f"/v1/models/{NAME}:predict"
V2 = f"/v2/models/{NAME}/infer"


@functools.lru_cache(maxsize=1)
def shared_tiny_export() -> Path:
    """One export per test process: exporting costs seconds, and serving never modifies it."""
    return make_exported_model(Path(tempfile.mkdtemp(prefix="tiny-ernie-")) / "model")


class FakeClassifier:
    """Stands in for Paddle where only the HTTP layer is under test; records batch sizes."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def predict(self, texts: list[str]) -> list[dict[str, Any]]:
        self.calls.append(len(texts))
        return [{"label": "positive", "probabilities": {"negative": 0.3, "positive": 0.7}} for _ in texts]


def fake_model(name: str = NAME, classifier: Any = None, **settings: Any) -> serving.ErnieModel:
    """An `ErnieModel` (not loaded) whose classifier is `classifier`, a new FakeClassifier by default."""
    classifier = FakeClassifier() if classifier is None else classifier
    return serving.ErnieModel(
        name, ServingConfig(**settings), model_dir=".", classifier_factory=lambda _d, _c: classifier
    )


def app_for(model: serving.ErnieModel, *others: Any) -> Any:
    """The server's app over `model` and any `others` (kserve models), with `model`'s body-size limit."""
    return serving.create_app([model, *others], model.cfg.max_request_bytes)


def fake_app(**settings: Any) -> tuple[Any, FakeClassifier]:
    """The server's app over one loaded `fake_model` with `settings`, and its FakeClassifier."""
    fake = FakeClassifier()
    model = fake_model(classifier=fake, **settings)
    model.load()
    return app_for(model), fake


@pytest.fixture(autouse=True)
def quiet_kserve() -> Iterator[None]:
    # kserve logs every rejected request with a traceback; thousands of them only slow the tests.
    logger = logging.getLogger("kserve")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def scrape(app: Any) -> str:
    async with client(app) as c:
        return (await c.get("/metrics")).text


def metric(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
