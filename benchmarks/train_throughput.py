"""Training throughput: `steps.train` against a bare Paddle loop on the same model, data and batches.

`steps.train` runs in-process through `main()` (MLflow, progress bar, Prometheus metrics and
per-epoch evaluation all on, as in a pipeline run); its samples/s is read from `training.json`
(`train_samples_per_second`: the optimisation loop only, without startup, evaluation or export).
The baseline is the loop a user would write: `ernie.build_model` with the same configuration, the
same tokenised texts in the same `LengthGroupedBatchSampler` batches, `paddle.optimizer.AdamW`,
forward / cross-entropy / backward / step / clear_grad and nothing else.

The bare loop runs twice per round: on Paddle's default (strided) dygraph kernels, and on the dense
ones `steps.train` uses on CPU (steps/runtime/training/dygraph.py); the three are measured in alternating
rounds (best round of each kept), so a change in background load on a shared machine hits all alike.

    python -m benchmarks.train_throughput                 # pipeline's model config, 60 steps × 3 rounds
    python -m benchmarks.train_throughput --steps 20 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

# The steps' code is imported where it is used (benchmarks/__init__.py says why).
from paddle_mlops_core.config import loader
from steps.runtime.training.sampler import LengthGroupedBatchSampler

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "pipeline.yaml"
CHARS = (
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后"
    "小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三己老从动两长"
    "知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最"
    "间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市"
    "眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计"
    "或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让"
    "认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办"
    "运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持"
    "取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞"
    "观争究包组造落视济喜离虽坏兴"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_data(directory: Path, n_train: int, n_dev: int, seed: int = 0, overrides: Sequence[str] = ()) -> None:
    """Random texts of 8-60 characters (a review-like length spread) with random labels, and what prepare-data
    computes from them for the local configuration with `overrides`."""
    from steps import prepare_data
    from steps.runtime.data import labelled_text

    rng = random.Random(seed)
    rows = [
        {"text": "".join(rng.choice(CHARS) for _ in range(rng.randint(8, 60))), "label": rng.randint(0, 1)}
        for _ in range(n_train + 2 * n_dev)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    splits = {"train": rows[:n_train], "dev": rows[n_train : n_train + n_dev], "test": rows[n_train + n_dev :]}
    for name, part in splits.items():
        (directory / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), "utf-8"
        )
    (directory / "label_map.json").write_text(json.dumps({"0": "negative", "1": "positive"}))
    (directory / "vocab.txt").write_text(
        "\n".join(labelled_text.build_vocab([str(r["text"]) for r in rows], 1, 8000)) + "\n", "utf-8"
    )
    # the split index and the tables prepare-data computes from the splits for the local configuration
    prepare_data.write_tables(loader.load_config(CONFIG, env="local", overrides=list(overrides)), None, directory)


def run_step(ws: Path, overrides: list[str]) -> float:
    from steps import train

    args = ["--config", str(CONFIG), "--env", "local", "--overrides", json.dumps(overrides), "--workspace", str(ws)]
    if train.main(args) != 0:
        raise SystemExit("steps.train failed")
    return float(json.loads((ws / "model" / "training.json").read_text())["train_samples_per_second"])


def run_bare(ws: Path, overrides: list[str], steps: int, dense: bool = False) -> float:
    """The bare loop's samples/s: on Paddle's default kernels, or (`dense`) on the trainer's dense CPU kernels
    (steps/runtime/training/dygraph.py)."""
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from steps.runtime.data import labelled_text
    from steps.runtime.training import dygraph
    from steps.runtime.weights import ernie

    cfg = loader.load_config(CONFIG, env="local", overrides=overrides)
    paddle.seed(cfg.training.seed)
    tokenizer = ernie.load_tokenizer(ws / "data" / "vocab.txt")
    rows = labelled_text.read_split(ws / "data" / "train.jsonl")
    ids = ernie.encode(tokenizer, [t for t, _ in rows], cfg.model.max_seq_len)
    labels = np.array([y for _, y in rows], dtype="int64")
    model = ernie.build_model(cfg.model, len(tokenizer.vocab), 2, tokenizer.pad_token_id)
    optimizer = paddle.optimizer.AdamW(learning_rate=cfg.training.learning_rate, parameters=model.parameters())
    sampler = LengthGroupedBatchSampler([len(i) for i in ids], cfg.training.batch_size, seed=cfg.training.seed)
    model.train()
    with dygraph.dense_kernels_on_cpu(use_gpu=False) if dense else nullcontext():
        done, samples, started = 0, 0, time.perf_counter()
        epoch = 0
        while done < steps:
            sampler.set_epoch(epoch)
            for indices in sampler:
                input_ids, token_type_ids = ernie.pad_batch([ids[i] for i in indices], tokenizer.pad_token_id)
                logits = model(paddle.to_tensor(input_ids), token_type_ids=paddle.to_tensor(token_type_ids))
                loss = F.cross_entropy(logits, paddle.to_tensor(labels[indices])).mean()
                loss.backward()
                optimizer.step()
                optimizer.clear_grad()
                done, samples = done + 1, samples + len(indices)
                if done >= steps:
                    break
            epoch += 1
        float(loss)  # wait for the device queue, as the step's epoch-end loss does
    return samples / (time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="train_throughput", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each side counts")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="A.B=VALUE",
        help="a configuration override for both sides (model size, training.amp=fp16, …); repeatable",
    )  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # equal footing on a shared machine; both sides alike

    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        base = Path(tmp)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{base / 'mlflow.db'}"
        n_train = args.batch_size * args.steps  # one epoch holds every step: no mid-run evaluation
        overrides = [
            "training.nproc=1", "training.epochs=1", f"training.batch_size={args.batch_size}",
            f"training.max_steps={args.steps}", f"training.metrics_port={_free_port()}", *args.overrides,
        ]  # fmt: skip
        write_data(base / "ws" / "data", n_train, 32, overrides=overrides)
        step_rates, bare_rates, dense_rates = [], [], []
        for _ in range(args.rounds):
            bare_rates.append(run_bare(base / "ws", overrides, args.steps))
            dense_rates.append(run_bare(base / "ws", overrides, args.steps, dense=True))
            step_rates.append(run_step(base / "ws", overrides))
            print(
                f"round: steps.train {step_rates[-1]:.1f} samples/s, bare loop {bare_rates[-1]:.1f} samples/s, "
                f"bare loop on dense kernels {dense_rates[-1]:.1f} samples/s",
                flush=True,
            )
        print(
            f"steps.train: {max(step_rates):.1f} samples/s; bare Paddle loop: {max(bare_rates):.1f} samples/s; "
            f"bare loop on dense kernels: {max(dense_rates):.1f} samples/s"
        )
        print(f"throughput ratio: {max(step_rates) / max(bare_rates):.2f}  (steps.train / the bare loop)")
        print(f"dense kernels ratio: {max(dense_rates) / max(bare_rates):.2f}  (the bare loop, dense / strided)")
        print(f"overhead ratio: {max(step_rates) / max(dense_rates):.2f}  (steps.train / the bare loop, both dense)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
