"""Model quality against the cheap baseline, per task: the baseline, the local default and each ingredient's ablation,
on the exact splits prepare-data writes, mean ± std over seeds, with each run's paired confidence interval.

Per task the data is prepared once per variant (`steps.prepare_data`, the local configuration with the variant's
settings: the same splits, and the tables prepare-data computes for its model) and the baseline fitted once
(it has no seed: TF-IDF + logistic regression, the CRF). Each variant × seed trains as `make run` does (the train step
under `paddle.distributed.launch` with `training.nproc` processes), then the exported model (Paddle fp32) answers the
test split and is compared with the baseline's answers (steps/runtime/data/baselines/comparison.py): the gate metric,
the
difference, its bootstrap interval and the paired test. Variants are `--set`-style overrides on the task's local
configuration; `pretrained=DIR` names a directory written by `paddle-mlops weights pretrain` (or any save_pretrained
copy) for the variants that fine-tune one.

    python -m benchmarks.quality --task sentiment --seeds 42 43 44 --pretrained .paddle-mlops/pretrain/ernie-mini
    python -m benchmarks.quality --task ner --variants scratch bigrams --seeds 42
    python -m benchmarks.quality --quick        # tiny data and model: that it runs (tests)
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The steps' code is imported where it is used (benchmarks/__init__.py says why).
from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from paddle_mlops_core.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "pipeline.yaml"
# The NER rows' common parts: the pre-trained copy, the ERNIE-CRF head in place of the counted transitions, and that
# head without the wide half and the classifier's dropout (the 13th session's default), with the wide half alone, or
# with both (the default since the 14th session, which the rows measured on it change one part of).
PRETRAINED = "model.pretrained={pretrained}"
CRF_HEAD = [PRETRAINED, "model.tag_transitions=false", "model.crf_head=true", "model.baseline_product=0"]
CRF = [*CRF_HEAD, "model.wide_scores=false", "model.classifier_dropout=null"]
CRF_WIDE = [*CRF_HEAD, "model.wide_scores=true", "model.classifier_dropout=null"]
CRF_WIDE_DROPOUT = [*CRF_HEAD, "model.wide_scores=true", "model.classifier_dropout=0.1"]
# What the rows measured before the CRF head take away from today's defaults: the CRF head, the wide half and the
# classifier's own dropout; with the transitions counted on the train split (the 12th session's decoding, which the
# `mlm+bigrams-*` rows' last figures were measured with) or without (the from-scratch `bigrams*` rows, 10th session)
BEFORE_CRF = [
    "model.crf_head=false", "model.wide_scores=false", "model.classifier_dropout=null", "model.baseline_product=0",
]  # fmt: skip
COUNTED = [*BEFORE_CRF, "model.tag_transitions=true"]
UNCOUNTED = [*BEFORE_CRF, "model.tag_transitions=false"]
# Each ingredient alone on top of the task's local settings, and the combinations worth a row.
VARIANTS: dict[str, dict[str, list[str]]] = {
    "sentiment": {
        # the local default (configs/tasks/sentiment.yaml): the small ERNIE from scratch with 65,536 bigram rows,
        # 32 wide, a vocabulary of the bigrams seen twice, both sides side by side; `no-bigrams` is the model the
        # table replaced
        "default": [],
        "no-bigrams": ["model.char_ngram_buckets=0", "model.char_ngram_trigrams=false"],
        "distill": ["training.distill_weight=0.5"],
        "bigrams128": ["model.char_ngram_dim=0"],
        "bigrams256k": ["model.char_ngram_buckets=262144", "model.char_ngram_dim=0"],
        "mlm": [PRETRAINED],
        "mlm+distill": [PRETRAINED, "training.distill_weight=0.5"],
        # the 9th-11th sessions' default: hashed (no vocabulary), sides summed
        "hashed": ["model.char_ngram_min_count=0", "model.char_ngram_sides=sum", "model.char_ngram_trigrams=false"],
        "no-trigrams": ["model.char_ngram_trigrams=false"],
        "min1": ["model.char_ngram_min_count=1"],
        "min3": ["model.char_ngram_min_count=3"],
        "d64": ["model.char_ngram_dim=64"],
        "3ep": ["training.epochs=3"],
        # one epoch's schedule (dev picks epoch 1 of the default's two: 18th session)
        "1ep": ["training.epochs=1"],
        # the from-scratch schedule's peak rate (the default's 1e-3) doubled and halved, and dropout before the
        # classifier alone (the encoder's hidden and attention dropouts 0 instead of 0.1; 16th session)
        "lr2e-3": ["training.learning_rate=0.002"],
        "lr5e-4": ["training.learning_rate=0.0005"],
        "classifier-dropout": ["model.dropout=0.0", "model.classifier_dropout=0.1"],
        # the wide half (a wide-and-deep classifier: the text's bag of n-grams, the TF-IDF baseline's features, as
        # per-label weights beside the encoder's score); `mlm+wide` on the pre-trained encoder
        "wide": ["model.wide_scores=true"],
        "mlm+wide": [PRETRAINED, "model.wide_scores=true"],
    },
    "ner": {
        # the local default (configs/tasks/ner.yaml) fine-tunes the staged ernie-mini-corpus-zh with 262,144 bigram
        # rows, 32 wide, the CRF head, the wide half and the classifier's dropout: `mlm+bigrams-crf-wide-dropout`, the
        # same weights read from --pretrained. Each row names the model it measured (docs/benchmarks.md has its
        # figures): `mlm+bigrams` is the 12th session's default (counted transitions, no CRF head, no wide half),
        # which its `-*` rows change one part of; `bigrams*` the 10th session's from-scratch rows; without the table
        # there is no wide half
        "scratch": ["model.pretrained=null", "model.char_ngram_buckets=0", *UNCOUNTED],
        "mlm": [PRETRAINED, "model.char_ngram_buckets=0", *UNCOUNTED],
        "bigrams": ["model.pretrained=null", *UNCOUNTED],
        "mlm+bigrams": [PRETRAINED, *COUNTED],
        # the table's vocabulary, its sides and the tag transitions, each taken away; `-hashed` all three (the
        # default of the 10th and 11th sessions)
        "mlm+bigrams-hashed": [PRETRAINED, *UNCOUNTED, "model.char_ngram_min_count=0", "model.char_ngram_sides=sum"],
        "mlm+bigrams-no-transitions": [PRETRAINED, *UNCOUNTED],
        "mlm+bigrams-sum": [PRETRAINED, *COUNTED, "model.char_ngram_sides=sum"],
        "mlm+bigrams-min0": [PRETRAINED, *COUNTED, "model.char_ngram_min_count=0"],
        "mlm+bigrams-min1": [PRETRAINED, *COUNTED, "model.char_ngram_min_count=1"],
        "mlm+bigrams-min3": [PRETRAINED, *COUNTED, "model.char_ngram_min_count=3"],
        "mlm+bigrams-d64": [PRETRAINED, *COUNTED, "model.char_ngram_dim=64"],
        "mlm+bigrams-dropout": [PRETRAINED, *COUNTED, "model.dropout=0.1"],
        # the ERNIE-CRF head: a CRF loss learns the transitions with the encoder, in place of the counted ones (the
        # 13th session's default: no wide half)
        "mlm+bigrams-crf": CRF,
        "mlm+bigrams-crf-2ep": [*CRF, "training.epochs=2"],
        "mlm+bigrams-crf-dropout": [*CRF, "model.dropout=0.1"],
        # the wide half (a wide-and-deep tagger: the CRF baseline's window features as per-tag weights beside the
        # encoder's scores), on the CRF head, without the classifier's dropout; `-trigrams` adds the centred trigram
        # (and the trigram table); `-dropout` is the default since the 14th session (`model.classifier_dropout 0.1`;
        # the same model as `model.dropout=0.1` on the pre-trained encoder, whose own dropouts are 0)
        "mlm+bigrams-crf-wide": CRF_WIDE,
        "mlm+bigrams-crf-wide-2ep": [*CRF_WIDE, "training.epochs=2"],
        "mlm+bigrams-crf-wide-trigrams": [*CRF_WIDE, "model.char_ngram_trigrams=true"],
        "mlm+bigrams-crf-wide-dropout": CRF_WIDE_DROPOUT,
        # the classifier's dropout at 0.2 (the default's 0.1 doubled)
        "mlm+bigrams-crf-wide-cd0.2": [*CRF_WIDE_DROPOUT, "model.classifier_dropout=0.2"],
        # AdamW's decoupled weight decay, the default's 0.01 times 10 (the wide half's and the bigram table's rows
        # memorise the train split by the second epoch: train loss 0.003, dev falling after it)
        "mlm+bigrams-crf-wide-wd0.1": [*CRF_WIDE_DROPOUT, "training.weight_decay=0.1"],
        # the encoder's peak rate lowered (the wide half's and the transitions' stay 0.03: their rates are their own),
        # and a fourth epoch
        "mlm+bigrams-crf-wide-lr2e-3": [*CRF_WIDE_DROPOUT, "training.learning_rate=0.002"],
        "mlm+bigrams-crf-wide-4ep": [*CRF_WIDE_DROPOUT, "training.epochs=4"],
        # half the batch per process (32, twice the optimizer steps; 16th session)
        "mlm+bigrams-crf-wide-b32": [*CRF_WIDE_DROPOUT, "training.batch_size=32"],
        # the baseline's CRF folded into the trained model (`model.baseline_product`, the default since the 17th
        # session: the product of the two CRFs); `-trigrams` with the trigram table, so the baseline's centred
        # trigram folds too
        "mlm+bigrams-crf-wide-product": [*CRF_WIDE_DROPOUT, "model.baseline_product=1.0"],
        # today's default where the copy is not staged (`model.scratch_if_unstaged`): the same model from scratch
        "fallback": ["model.pretrained=null"],
        "mlm+bigrams-crf-wide-product-trigrams": [
            *CRF_WIDE_DROPOUT,
            "model.baseline_product=1.0",
            "model.char_ngram_trigrams=true",
        ],
        # the fine-tune's schedule: the config's 3 epochs at 3e-3 (tuned from scratch) against the alternatives
        "mlm+bigrams-lr5e-3": [PRETRAINED, *COUNTED, "training.learning_rate=0.005"],
        "mlm+bigrams-lr1.5e-3": [PRETRAINED, *COUNTED, "training.learning_rate=0.0015"],
        "mlm+bigrams-lr1e-3": [PRETRAINED, *COUNTED, "training.learning_rate=0.001"],
        "mlm+bigrams-lr7.5e-4": [PRETRAINED, *COUNTED, "training.learning_rate=0.00075"],
        "mlm+bigrams-5ep": [PRETRAINED, *COUNTED, "training.epochs=5"],
        "bigrams128": ["model.pretrained=null", *UNCOUNTED, "model.char_ngram_dim=0"],
        "bigrams+dropout": ["model.pretrained=null", *UNCOUNTED, "model.dropout=0.1"],
        "bigrams64k+dropout": [
            "model.pretrained=null",
            *UNCOUNTED,
            "model.char_ngram_buckets=65536",
            "model.dropout=0.1",
        ],
    },
    "text-matching": {
        "default": [],
        "distill": ["training.distill_weight=0.5"],
    },
}
QUICK = [
    "data.max_samples=300", "data.vocab_min_freq=1", "model.hidden_size=32", "model.num_hidden_layers=1",
    "model.intermediate_size=64", "model.max_seq_len=32", "training.epochs=1", "training.nproc=1",
]  # fmt: skip


def _step_args(task: str, overrides: Sequence[str]) -> list[str]:
    return ["--config", str(CONFIG), "--env", "local", "--task", task, "--overrides", json.dumps(list(overrides))]


def prepare(task: str, overrides: Sequence[str], data_dir: Path) -> None:
    from steps import prepare_data

    if prepare_data.main([*_step_args(task, overrides), "--output", str(data_dir)]) != 0:
        raise SystemExit(f"prepare-data failed for {task}")


def train(task: str, overrides: Sequence[str], workspace: Path, nproc: int, env: dict[str, str]) -> float:
    """The train step as `make run` launches it; its wall seconds."""
    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc),
               "--log_dir", str(workspace / "paddle-log"), str(ROOT / "steps" / "train.py"),
               *_step_args(task, overrides), "--workspace", str(workspace)]  # fmt: skip
    if nproc == 1:
        command = [sys.executable, "-m", "steps.train", *_step_args(task, overrides), "--workspace", str(workspace)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"training failed ({' '.join(command)}):\n{(done.stdout + done.stderr)[-3000:]}")
    return time.monotonic() - started


def score(task: str, overrides: Sequence[str], workspace: Path, fitted: Any) -> dict[str, Any]:
    """The model's test figures beside the baseline's (the comparison evaluate reports)."""
    from steps.runtime.data import evaluation
    from steps.runtime.data.baselines import comparison

    cfg = load_config(CONFIG, "local", list(overrides), task=task)
    data_dir = workspace / "data"
    scored = evaluation.score(cfg, workspace / "model", data_dir)
    figures = comparison.compare(cfg, scored.rows, scored.answers, fitted, scored.labels)
    training = json.loads((workspace / "model" / "training.json").read_text())
    return {**{k: figures[k] for k in ("metric", "model", "baseline", "difference", "ci_low", "ci_high")},
            "p_value": figures["test"]["p_value"], "test": figures["test"]["name"],
            "best_epoch": training.get("best_epoch"), "train_samples_per_second": training.get(
                "train_samples_per_second")}  # fmt: skip


def run_task(task: str, variants: Sequence[str], seeds: Sequence[int], args: Any, out: Path) -> dict[str, Any]:
    from steps.runtime.data import baselines

    base = QUICK if args.quick else []
    data_dir = out / task / "data"
    prepare(task, base, data_dir)
    store = f"storage.uri={out / 'store'}"  # the baseline's stored answers live in --workdir: a rerun reuses them
    fitted = baselines.fit(load_config(CONFIG, "local", [*base, store], task=task), data_dir)
    print(f"{task}: baseline {fitted.kind} fitted in {fitted.seconds:.1f} s (stored: {fitted.cached})", flush=True)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}", "PADDLE_MLOPS_HOME": str(out)}
    rows: dict[str, list[dict[str, Any]]] = {}
    for variant in variants:
        # the store too: a model that folds the baseline in (`model.baseline_product`) reads it from there
        chosen = [*base, store, *(o.format(pretrained=args.pretrained) for o in VARIANTS[task][variant])]
        # The same splits for every variant (they depend on the data settings alone), and the tables prepare-data
        # computes once from them for the variant's model (its n-gram table, its distillation teacher).
        variant_data = out / task / f"data-{variant}"
        prepare(task, chosen, variant_data)
        for seed in seeds:
            sets = [*chosen, f"training.seed={seed}"]
            ws = out / task / f"{variant}-{seed}"
            # A fresh workspace each time: the train step resumes from a checkpoint it finds in <ws>/train (the run
            # id digests the commit and the configuration, not uncommitted code), so a rerun would not retrain.
            if ws.exists():
                shutil.rmtree(ws)
            ws.mkdir(parents=True)
            (ws / "data").symlink_to(variant_data)
            seconds = train(task, sets, ws, 1 if args.quick else args.nproc, env)
            row = score(task, sets, ws, fitted) | {"seed": seed, "train_seconds": round(seconds, 1)}
            rows.setdefault(variant, []).append(row)
            print(f"{task} {variant} seed {seed}: {json.dumps(row)}", flush=True)
    return {"baseline": {"kind": fitted.kind, "seconds": fitted.seconds}, "variants": _aggregate(rows)}


def _aggregate(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out = {}
    for variant, runs in rows.items():
        values = [r["model"] for r in runs]
        out[variant] = {
            "runs": runs,
            "mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "baseline": runs[0]["baseline"],
            "mean_difference": statistics.mean(r["difference"] for r in runs),
            "train_seconds": statistics.mean(r["train_seconds"] for r in runs),
        }
    return out


def table(task: str, result: dict[str, Any]) -> list[str]:
    """Markdown rows: variant, mean ± std, the difference and each seed's interval."""
    figure = next(iter(result["variants"].values()))["baseline"]
    lines = [
        f"| {task} | baseline {result['baseline']['kind']} | {figure:.4f} | — | — | {result['baseline']['seconds']} s |"
    ]
    for variant, v in result["variants"].items():
        intervals = "; ".join(f"{r['ci_low']:+.3f}…{r['ci_high']:+.3f}" for r in v["runs"])
        lines.append(f"| {task} | {variant} | {v['mean']:.4f} ± {v['std']:.4f} | {v['mean_difference']:+.4f} | "
                     f"{intervals} | {v['train_seconds']:.0f} s |")  # fmt: skip
    return lines


def _variants(parser: Any, task: str, args: Any) -> list[str]:
    """The task's variants to run: --variants, else every one it can (those fine-tuning a copy need --pretrained)."""
    names: list[str] = args.variants or [
        v for v in VARIANTS[task] if "{pretrained}" not in str(VARIANTS[task][v]) or args.pretrained
    ]
    unknown = [v for v in names if v not in VARIANTS[task]]
    if unknown:
        parser.error(f"--variants: {', '.join(unknown)} not a variant of {task} (one of {', '.join(VARIANTS[task])})")
    unread = [v for v in names if "{pretrained}" in str(VARIANTS[task][v]) and not args.pretrained]
    if unread:
        parser.error(
            f"--variants: {', '.join(unread)} fine-tune a pre-trained copy: name its directory with "
            "--pretrained (`paddle-mlops weights pretrain ernie-mini-corpus-zh` writes one)"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser("quality", __doc__)
    parser.add_argument("--task", action="append", choices=sorted(VARIANTS), help="repeatable; default: sentiment")
    parser.add_argument("--variants", nargs="+", default=None, help="default: every variant of the task")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--pretrained", default="", help="the MLM-pretrained directory the `mlm` variants fine-tune")
    parser.add_argument("--nproc", type=int, default=2, help="training processes (make run: 2)")
    parser.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary directory)")
    args = parse_benchmark_args(parser, argv, "tiny data and model, one seed: that it runs")
    chosen = {task: _variants(parser, task, args) for task in args.task or ["sentiment"]}  # all checked first
    out = Path(args.workdir or tempfile.mkdtemp(prefix="quality-"))
    results: dict[str, Any] = {"cpu": _cpu(), "seeds": args.seeds}
    lines = [
        "| task | variant | test metric (mean ± std) | vs baseline | 95 % CI per seed | train |",
        "|---|---|---|---|---|---|",
    ]
    for task, names in chosen.items():
        results[task] = run_task(task, names, args.seeds[:1] if args.quick else args.seeds, args, out)
        lines += table(task, results[task])
    print("\n".join(lines))
    write_results(args.json_out, results)
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
