"""Served speed: the texts/s each classifier reaches through the real serving stack on a loopback socket.

Every classifier is served as `python -m steps.serve` serves one — `ErnieModel` (input checks, the dynamic batcher),
`create_app` (guard, V1 fast path, kserve's endpoints), uvicorn with httptools and uvloop — each on its own
127.0.0.1 port, all on one event loop with the load generator: `clients` keep-alive aiohttp clients, one instance
per request, as many concurrent requests as a full batch holds. The servers are measured in interleaved rounds
(two waves of requests each, the order rotated, a pause before each turn for the previous engine's worker threads
to stop spinning) after one untimed round each, and each one's figure is its median round. The client shares the
CPUs with the server, as a client on the same node would; a variant whose in-process speed the HTTP work swamps
gains nothing from it here either. Evaluate's engine selection ranks the variants by this figure.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving.model_server.app import create_app
from steps.runtime.serving.model_server.model import Classifier, ErnieModel
from steps.runtime.serving.model_server.server import bind_socket, run_server, uvicorn_server

MODEL_NAME = "served-speed"
_JSON = {"Content-Type": "application/json"}


@dataclass
class ServedSpeed:
    """One classifier's rounds: texts/s of each, or why it stopped being measured."""

    per_round: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def texts_per_s(self) -> float | None:
        """The median round; None when no round completed."""
        return statistics.median(self.per_round) if self.per_round and not self.error else None


@dataclass
class _Served:
    model: ErnieModel
    server: Any
    url: str
    session: Any = None


def served_speeds(
    classifiers: Mapping[str, Classifier],
    cfg: ServingConfig,
    instances: Sequence[Any],
    clients: int,
    rounds: int,
    pause: float,
    budget_s: float,
) -> dict[str, ServedSpeed]:
    """Serve every classifier on a loopback port and measure `rounds` interleaved rounds of 2 x `clients` requests
    (`instances` in turn, one per request); rounds stop early once `budget_s` seconds have passed (each classifier
    gets at least one). A classifier whose answers fail is reported with its error and not measured further."""
    if not classifiers:
        return {}
    servers = {name: _serve(name, clf, cfg) for name, clf in classifiers.items()}
    bodies = [orjson.dumps({"instances": [instance]}) for instance in instances]
    loop_factory = next(iter(servers.values())).server.config.get_loop_factory()
    quiet = logging.getLogger("uvicorn.error")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # each server's start-up and shut-down lines say nothing evaluate needs
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(_measure(servers, bodies, clients, rounds, pause, budget_s))
    finally:
        quiet.setLevel(level)
        for served in servers.values():
            served.model.batcher.close()


def _serve(name: str, clf: Classifier, cfg: ServingConfig) -> _Served:
    model = ErnieModel(MODEL_NAME, cfg, model_dir=".", classifier_factory=lambda _dir, _cfg: clf)
    model.load()
    return _Served(model, uvicorn_server(create_app([model], cfg.max_request_bytes)), "")


async def _measure(
    servers: dict[str, _Served], bodies: list[bytes], clients: int, rounds: int, pause: float, budget_s: float
) -> dict[str, ServedSpeed]:
    import aiohttp

    sockets = {name: bind_socket("127.0.0.1", 0) for name in servers}
    tasks = {name: asyncio.create_task(run_server(served.server, sockets[name])) for name, served in servers.items()}
    speeds = {name: ServedSpeed() for name in servers}
    try:
        for name, served in servers.items():
            while not served.server.started:
                if tasks[name].done():
                    raise RuntimeError(f"the loopback server for {name} did not start: {tasks[name].exception()}")
                await asyncio.sleep(0.01)
            served.url = f"http://127.0.0.1:{sockets[name].getsockname()[1]}/v1/models/{MODEL_NAME}:predict"
            connector = aiohttp.TCPConnector(limit=clients)
            served.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120))
        wave = 2 * clients
        for name, served in servers.items():  # untimed: connections, the batch shapes' first calls
            await _guarded(speeds[name], _round(served, bodies[:wave] or bodies, clients))
        deadline = time.monotonic() + budget_s
        names = list(servers)
        for r in range(rounds):
            if r and time.monotonic() > deadline:
                break
            chunk = [bodies[(r * wave + i) % len(bodies)] for i in range(wave)]
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if speeds[name].error:
                    continue
                await asyncio.sleep(pause)
                rate = await _guarded(speeds[name], _round(servers[name], chunk, clients))
                if rate is not None:
                    speeds[name].per_round.append(rate)
    finally:
        for served in servers.values():
            if served.session is not None:
                await served.session.close()
            served.server.should_exit = True
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for sock in sockets.values():
            sock.close()
    return speeds


async def _guarded(speed: ServedSpeed, measured: Any) -> float | None:
    """The round's texts/s, or None with the error kept (the variant is then not measured further)."""
    if speed.error:
        measured.close()
        return None
    try:
        return await measured
    except Exception as exc:  # noqa: BLE001 — one variant failing under load must not stop the others' rounds
        speed.error = f"{type(exc).__name__}: {exc}"
        return None


async def _round(served: _Served, bodies: Sequence[bytes], clients: int) -> float:
    """`bodies` sent by `clients` closed-loop clients; texts answered per second."""
    pending = iter(bodies)

    async def client() -> int:
        answered = 0
        for body in pending:
            async with served.session.post(served.url, data=body, headers=_JSON) as response:
                payload = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"answered {response.status}: {payload[:200]!r}")
            answered += 1
        return answered

    start = time.perf_counter()
    answered = sum(await asyncio.gather(*(client() for _ in range(clients))))
    return answered / (time.perf_counter() - start)


__all__ = ["ServedSpeed", "served_speeds"]
