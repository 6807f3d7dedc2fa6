"""Parameter-server training (`training.topology: ps`) with `paddle.distributed.fleet`.

Paddle's parameter server keeps large sparse tables on server processes and lets trainers push
gradients asynchronously; it runs static-graph programs only. The model here is the classic PS
workload: an embedding bag (a `sparse_embedding` table held by the servers) and a linear
classifier over the same `data/` as the ERNIE trainer. It does not export an ERNIE model; it writes
`model/ps_training.json` (first and last loss, steps) from trainer 0.

Launch: `python -m paddle.distributed.launch --run_mode ps --server_num S --trainer_num T steps/train.py …`
(the launcher sets TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINER_ID … that
`fleet.init(is_collective=False)` reads). Needs a paddlepaddle build with the parameter server
compiled in (WITH_PSCORE: the Linux GPU wheels, and CPU wheels up to 3.0.0; the 3.1+ CPU wheels
dropped it); `available()` says whether this one has it. `make ps-env` builds `.venv-ps`, the locked
runtime set with paddlepaddle 3.0.0, where `make test` runs a 1-server, 2-trainer job.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.data import labelled_text
from steps.runtime.runner import StepError
from steps.runtime.training.sampler import LengthGroupedBatchSampler

log = logging.getLogger("steps.train.ps")
EMBEDDING_DIM = 64
SERVER_WAIT_S = 600.0


def available() -> bool:
    """Whether this paddle build has the parameter-server core (`fleet.init_server` needs it)."""
    from paddle.base import core

    # fleet's PS program passes import CommContext; init_server/init_worker need DistFleetWrapper
    return hasattr(core, "DistFleetWrapper") and hasattr(core, "CommContext")


def require() -> None:
    if not available():
        raise StepError(
            "training.topology=ps needs a paddlepaddle build with the parameter server (WITH_PSCORE); "
            "this one has none (the CPU wheels of paddlepaddle 3.x ship without it). Use "
            "training.topology=collective, or run in the train image built on a PS-enabled paddlepaddle."
        )


def wait_for_servers(endpoints: list[str], timeout_s: float) -> None:
    """Block until every `host:port` accepts a TCP connection; StepError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    waiting = list(endpoints)
    while waiting:
        host, _, port = waiting[0].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            waiting.pop(0)
            continue
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise StepError(
                f"parameter servers {', '.join(waiting)} not listening after {timeout_s:.0f}s; "
                "check the server pods' logs (serverlog.* locally)"
            )
        log.info("waiting for parameter servers: %s", ", ".join(waiting))
        time.sleep(1)


def build_program(vocab_size: int, num_labels: int, learning_rate: float, pad_id: int) -> tuple[Any, Any, Any]:
    """(main, startup, loss) with fleet's asynchronous PS optimizer applied. Call after fleet.init."""
    import paddle
    import paddle.nn.functional as F
    from paddle.distributed import fleet

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        # Token ids flattened to [batch * length, 1]: the 2-D, trailing-unit shape that both
        # lookup_table and fleet's distributed_lookup_table (which the PS pass swaps in) accept.
        ids = paddle.static.data("input_ids", [None, 1], "int64")
        label = paddle.static.data("label", [None, 1], "int64")
        # held by the servers, rows pulled and pushed on demand: what PS mode is for
        emb = paddle.static.nn.sparse_embedding(ids, size=[vocab_size, EMBEDDING_DIM], padding_idx=pad_id)
        # padding rows of the table are zero, so the mean is a length-normalised bag of words
        bag = paddle.mean(paddle.reshape(emb, [paddle.shape(label)[0], -1, EMBEDDING_DIM]), axis=1)
        logits = paddle.static.nn.fc(bag, num_labels)
        loss = F.cross_entropy(logits, label).mean()
        strategy = fleet.DistributedStrategy()
        strategy.a_sync = True  # trainers push gradients without waiting for each other
        optimizer = fleet.distributed_optimizer(paddle.optimizer.Adam(learning_rate), strategy)
        optimizer.minimize(loss)
        # fleet's PS passes rewrite clones: the trainer (or server) programs to run are the ones
        # minimize() leaves on the loss and as the default startup program.
        main, startup = loss.block.program, paddle.static.default_startup_program()
    return main, startup, loss


def run(cfg: PipelineConfig, data_dir: Path, out_dir: Path) -> dict[str, Any] | None:
    """Serve (server processes) or train (trainer processes) until the job ends."""
    require()
    import paddle
    from paddle.distributed import fleet

    from steps.runtime.weights import ernie

    paddle.enable_static()
    fleet.init(is_collective=False)
    tokenizer = ernie.load_tokenizer(data_dir / "vocab.txt")
    labels = labelled_text.read_label_map(data_dir / "label_map.json")
    # fleet's PS passes rewrite legacy ProgramDescs; Paddle 3's default PIR programs are not supported there
    with paddle.pir_utils.OldIrGuard():
        main, startup, loss = build_program(
            len(tokenizer.vocab), len(labels), cfg.training.learning_rate, tokenizer.pad_token_id
        )
        return _serve_or_train(cfg, data_dir, out_dir, tokenizer, main, startup, loss)


def _serve_or_train(
    cfg: PipelineConfig, data_dir: Path, out_dir: Path, tokenizer: Any, main: Any, startup: Any, loss: Any
) -> dict[str, Any] | None:
    from paddle.distributed import fleet

    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()  # returns when the trainers have stopped
        return None
    exe = _start_worker(startup)
    losses = _train_steps(cfg, data_dir, tokenizer, exe, main, loss)
    fleet.barrier_worker()  # every trainer has sent its last gradients
    if fleet.is_first_worker():
        # Paddle 3.0's stop_worker() no longer tells the servers to stop, and the launcher (like a
        # PaddleJob) waits for every process: without this, run_server() never returns.
        runtime: Any = fleet.fleet._runtime_handle  # None in Paddle's class body until init_worker sets it
        runtime._worker.stop_server()
    fleet.stop_worker()
    summary = {
        "topology": "ps",
        "trainers": fleet.worker_num(),
        "steps": len(losses),
        "first_loss": float(np.mean(losses[:3])),
        "last_loss": float(np.mean(losses[-3:])),
    }
    if fleet.is_first_worker():
        _write_summary(out_dir, summary)
    return summary


def _start_worker(startup: Any) -> Any:
    """A CPU executor that has run `startup`, its trainer registered with every (listening) server."""
    import paddle
    from paddle.distributed import fleet

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    # init_worker pushes the dense parameters to the servers before it waits for them to listen
    # (and Paddle 3.0's wait_server_ready is a no-op), so a trainer that starts faster than the
    # servers fails with "push dense param failed": wait for every server endpoint first.
    endpoints = fleet.server_endpoints()
    wait_for_servers(endpoints.split(",") if isinstance(endpoints, str) else endpoints, SERVER_WAIT_S)
    fleet.init_worker()
    return exe


def _train_steps(cfg: PipelineConfig, data_dir: Path, tokenizer: Any, exe: Any, main: Any, loss: Any) -> list[float]:
    """Run this trainer's share of `train.jsonl` for the configured epochs (or max_steps); the losses."""
    from paddle.distributed import fleet

    from steps.runtime.weights import ernie

    rows = labelled_text.read_split(data_dir / "train.jsonl")
    ids = ernie.encode(tokenizer, [t for t, _ in rows], cfg.model.max_seq_len)
    targets = np.array([y for _, y in rows], dtype="int64").reshape(-1, 1)
    sampler = LengthGroupedBatchSampler(
        [len(i) for i in ids], cfg.training.batch_size, num_replicas=fleet.worker_num(), rank=fleet.worker_index(),
        seed=cfg.training.seed,
    )  # fmt: skip
    losses: list[float] = []
    limit = cfg.training.max_steps or cfg.training.epochs * len(sampler)
    for epoch in range(cfg.training.epochs):
        sampler.set_epoch(epoch)
        for indices in sampler:
            if len(losses) >= limit:
                break
            input_ids, _ = ernie.pad_batch([ids[i] for i in indices], tokenizer.pad_token_id)
            (value,) = exe.run(
                main, feed={"input_ids": input_ids.reshape(-1, 1), "label": targets[indices]}, fetch_list=[loss]
            )
            losses.append(float(np.asarray(value)))
    return losses


def _write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    (out_dir / "model").mkdir(parents=True, exist_ok=True)
    (out_dir / "model" / "ps_training.json").write_text(json.dumps(summary, indent=2))
    log.info(
        "parameter-server training: loss %.4f -> %.4f over %d steps",
        summary["first_loss"],
        summary["last_loss"],
        summary["steps"],
    )
