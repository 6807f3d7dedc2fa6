"""The serving benchmark's contenders as its measurements see them, and the figures each gathers.

Every contender answers the same calls (`open`, `time_one`, `throughput`, `predict_many`), so the measurements
interleave them without knowing which is which: `InProcess` hands its calls to the host process, where the
predictor is called directly; `HttpContender` sends them to one of the host's servers over 127.0.0.1. `Result`
holds one contender's batch-1 latencies and throughput rounds.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import statistics
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from benchmarks import load
from benchmarks.serving_host import Host


@dataclass
class Result:
    """One contender's figures: its batch-1 latencies and its throughput rounds."""

    name: str
    latencies: list[float] = field(default_factory=list)  # seconds, batch 1
    texts: int = 0
    seconds: float = 0.0
    note: str = ""
    per_round: list[float] = field(default_factory=list)  # texts/s in each throughput round

    def add_round(self, done: int, seconds: float) -> None:
        self.texts += done
        self.seconds += seconds
        self.per_round.append(done / seconds)

    def pct(self, q: int) -> float:
        return (
            statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]
            if len(self.latencies) > 1
            else self.latencies[0]
        )

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def throughput(self) -> float:
        """Texts/s: the median round (a round caught in one of the machine's slow spells is an outlier)."""
        return statistics.median(self.per_round) if self.per_round else 0.0

    @property
    def total_throughput(self) -> float:
        """Texts/s over all rounds together."""
        return self.texts / self.seconds if self.seconds else 0.0

    def paired_ratio(self, other: Result) -> float:
        """Median over the rotations of this contender's round / `other`'s round in the same rotation.

        The rounds of one rotation run within a few seconds of each other, so each pair shares the
        machine's state; a ratio of the two medians instead compares two samples of a machine that
        switches between a fast and a slow state, and each median lands in either.
        """
        return statistics.median(mine / theirs for mine, theirs in zip(self.per_round, other.per_round, strict=True))


class InProcess:
    """The in-process contender: the host process calls its predictor directly, and times itself."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def open(self, text: str) -> None:
        self.time_one(text)

    def time_one(self, text: str) -> float:
        return self.host.call(op="time", texts=[text])["seconds"]

    def throughput(self, texts: Sequence[str], batch: int) -> tuple[int, float]:
        """`texts` in batches of `batch`, back to back, on our server's model thread."""
        reply = self.host.call(op="throughput", texts=list(texts), batch=batch)
        return reply["done"], reply["seconds"]

    def predict_many(self, texts: Sequence[str]) -> None:
        self.host.call(op="predict", texts=list(texts))


class HttpContender:
    """A load generator that costs the shared CPUs as little as possible.

    Batch-1 latency uses one keep-alive `http.client` connection (its CPU cost per request is in
    docs/benchmarks.md); throughput uses benchmarks/load.py's closed loop (one keep-alive asyncio
    connection per concurrent client, requests encoded before the clock starts, answers parsed by
    httptools), and `throughput_aiohttp` the same loop with aiohttp, the client evaluate's selection uses
    (steps/runtime/serving/model_server/loopback.py), which costs the shared CPUs more per request. All send the body
    in one write with the headers.
    """

    def __init__(self, url: str, model_name: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.path = f"/v1/models/{model_name}:predict"
        self.url = f"{url}{self.path}"
        self.ready_url = f"{url}/v1/models/{model_name}"
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def close(self) -> None:
        self.conn.close()

    @staticmethod
    def body(text: str) -> bytes:
        return json.dumps({"instances": [text]}, ensure_ascii=False).encode()

    def _post(self, text: str) -> None:
        self._send(self.body(text))

    def _send(self, body: bytes) -> None:
        self.conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"{self.url} answered {response.status}: {payload[:200]!r}")

    def predict_many(self, texts: Sequence[str]) -> None:
        """One request with all `texts` as instances: one model call of that batch size."""
        self.conn.close()
        self._send(json.dumps({"instances": list(texts)}, ensure_ascii=False).encode())

    def open(self, text: str) -> None:
        """A fresh keep-alive connection (servers close idle ones after a few seconds), opened by one untimed
        request."""
        self.conn.close()
        self._post(text)

    def time_one(self, text: str) -> float:
        start, end = self.stamped(text)
        return end - start

    def stamped(self, text: str) -> tuple[float, float]:
        """One request with `text`: `time.perf_counter()` when it was sent and when its whole answer was read."""
        start = time.perf_counter()
        self._post(text)
        return start, time.perf_counter()

    def throughput(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
        """`texts`, one per request, from `clients` closed-loop keep-alive clients: (answered, seconds)."""
        requests = [load.post_request(self.host, self.port, self.path, self.body(text)) for text in texts]
        ready = load.get_request(self.host, self.port, urllib.parse.urlsplit(self.ready_url).path)
        return load.run_closed_loop(self.host, self.port, requests, clients, ready)

    def throughput_aiohttp(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
        """`throughput` with aiohttp clients."""
        import uvloop  # the dev extra's (pyproject.toml): the benchmarks' load generators alone use it

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self._concurrent(texts, clients))

    async def _concurrent(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
        pending = iter(texts)
        headers = {"Content-Type": "application/json"}
        connector = aiohttp.TCPConnector(limit=clients, force_close=False)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

            async def post(text: str) -> None:
                async with session.post(self.url, data=self.body(text), headers=headers) as response:
                    payload = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{self.url} answered {response.status}: {payload[:200]!r}")

            async def worker() -> int:
                sent = 0
                for text in pending:
                    await post(text)
                    sent += 1
                return sent

            # Open every connection first (with the model's readiness check, no inference), so
            # connection set-up is not part of the measurement.
            async def ready() -> None:
                async with session.get(self.ready_url) as response:
                    await response.read()

            await asyncio.gather(*(ready() for _ in range(clients)))
            start = time.perf_counter()
            counts = await asyncio.gather(*(worker() for _ in range(clients)))
            return sum(counts), time.perf_counter() - start
