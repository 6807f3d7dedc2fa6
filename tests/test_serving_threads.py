"""Where the model server runs the model: lone requests on the loop thread, batches on the model thread, OpenMP spin."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from steps.runtime.serving import model_server as serving
from steps.runtime.serving import openmp
from tests.serving_fixtures import fake_model, quiet_kserve  # noqa: F401 — quiet_kserve is autouse


def test_a_lone_request_runs_on_the_loop_thread_and_batches_on_the_model_thread() -> None:
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
    threads: list[str] = []

    class Recording:
        def predict(self, texts: list[str]) -> list[dict[str, Any]]:
            threads.append(threading.current_thread().name)
            return [{"label": "positive", "probabilities": {"positive": 1.0}} for _ in texts]

    model = fake_model("m", Recording(), inline_lone_requests=False)
    model.load()

    async def go() -> None:
        await model.predict(["lone"])
        await model.predict(["again"])

    asyncio.run(go())
    assert len(threads) == 2 and all(name.startswith("model") for name in threads)


def fresh_thread_blocktime() -> int | None:
    """The OpenMP block time a new thread starts with."""
    plain: list[int | None] = []
    thread = threading.Thread(target=lambda: plain.append(openmp.get_blocktime()))
    thread.start()
    thread.join()
    return plain[0]


@pytest.mark.parametrize("spin_ms", [3, None])
def test_every_thread_that_runs_the_model_sets_serving_openmp_spin_ms(spin_ms: int | None) -> None:
    import paddle  # noqa: F401 — loads Paddle's Intel OpenMP runtime, as the real classifier does

    seen: list[tuple[str, int | None]] = []

    class Recording:
        def predict(self, texts: list[str]) -> list[dict[str, Any]]:
            seen.append((threading.current_thread().name, openmp.get_blocktime()))
            return [{"label": "positive", "probabilities": {"positive": 1.0}} for _ in texts]

    model = fake_model("m", Recording(), openmp_spin_ms=spin_ms, max_wait_ms=50)
    model.load()

    async def go() -> None:
        await model.predict(["lone"])  # inline, on the loop thread
        await asyncio.gather(*(model.predict([f"t{i}"]) for i in range(4)))  # a batch, on the model thread

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
