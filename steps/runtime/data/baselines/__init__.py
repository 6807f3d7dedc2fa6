"""The cheap baseline every candidate is compared with, fitted on the same train split and scored on the same test
split prepare-data wrote (`data/`): one module per kind (`text`: TF-IDF + logistic regression; `pairs`: the same on
pair features; `crf`: a linear-chain CRF for NER), `statistics` for the paired tests, `counts` for per-example metric
counts, `comparison` for the figures evaluate and validate report, `cache` for the content-keyed store copy,
`fitted` for what they share.

The fit runs in a child process under `baseline.time_limit_seconds`; evaluate stores the answers in the object
store under a key made of the splits' digests, the kind, its settings and the library versions, so validate (and a
rerun on the same data) reads them instead of fitting again, and both judge against the same figure.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import time
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TOKEN_CLASSIFICATION
from steps.runtime.data import tasks
from steps.runtime.data.baselines import cache, crf, pairs, text
from steps.runtime.data.baselines.fitted import KINDS, BaselineError, Fitted
from steps.runtime.data.labelled_text import read_label_map

__all__ = ["KINDS", "BaselineError", "Fitted", "fit", "fit_in_process", "module_for"]

log = logging.getLogger("steps.baseline")
# Each kind's module (their libraries load inside their functions, so importing all three is cheap).
_MODULES: dict[str, Any] = {"text": text, "pairs": pairs, "crf": crf}


def module_for(task_type: str) -> Any:
    """The baseline module of a task type (`KIND`, `DESCRIPTION`, `fit_predict`). Imported above, never by name: a
    step's code key digests the modules it imports (steps/runtime/caching/keys.py), so a kind loaded with importlib
    would be code the key of evaluate, validate and the baseline store does not cover (docs/caching.md)."""
    return _MODULES[KINDS[task_type]]


def fit(cfg: PipelineConfig, data_dir: Path) -> Fitted:
    """The baseline of this configuration's task on `data_dir`'s splits: from the store when fitted before on the
    same content, else fitted now (and stored). StepError when it takes longer than baseline.time_limit_seconds."""
    key, versions = cache.key(cfg, data_dir)
    found = cache.read(cfg, key)
    if found is not None:
        log.info("baseline %s: answers of the same splits and settings read from the store (%s)", found.kind, key[:12])
        return found
    fitted = _fit_bounded(cfg, data_dir)
    fitted.key, fitted.versions = key, versions
    cache.write(cfg, fitted)
    return fitted


def _fit_bounded(cfg: PipelineConfig, data_dir: Path) -> Fitted:
    """`fit_in_process` in a child process, stopped past the time limit (a solver cannot be interrupted)."""
    limit = cfg.baseline.time_limit_seconds
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds Paddle's threads
    results = context.Queue()
    child = context.Process(target=_child, args=(cfg.model.task, str(data_dir), cfg.baseline.crf_iterations, results))
    started = time.monotonic()
    child.start()
    try:
        outcome = results.get(timeout=limit)
    except queue.Empty:
        raise BaselineError(
            f"the {KINDS[cfg.model.task]} baseline did not finish within baseline.time_limit_seconds={limit:g} "
            f"(fitting on {data_dir / 'train.jsonl'}); raise baseline.time_limit_seconds, or set gate.baseline: off "
            "to publish without comparing with it"
        ) from None
    finally:
        if child.is_alive():
            child.terminate()
        child.join()
    if isinstance(outcome, str):
        raise BaselineError(f"the baseline could not be fitted: {outcome}")
    outcome.seconds = round(time.monotonic() - started, 1)
    return outcome


def _child(task_type: str, data_dir: str, iterations: int, results: Any) -> None:
    try:
        results.put(fit_in_process(task_type, Path(data_dir), iterations))
    except Exception as exc:  # the parent reports it; a traceback in a child's stderr would be lost
        results.put(f"{type(exc).__name__}: {exc}")


def fit_in_process(task_type: str, data_dir: Path, crf_iterations: int = 100) -> Fitted:
    """Fit the task type's baseline on `data_dir`'s train (and dev) split and answer its test split."""
    task, module = tasks.for_type(task_type), module_for(task_type)
    rows = {split: task.read_rows(data_dir / f"{split}.jsonl") for split in ("train", "dev", "test")}
    labels = read_label_map(data_dir / "label_map.json")
    started = time.monotonic()
    extra = {"iterations": crf_iterations} if task_type == TOKEN_CLASSIFICATION else {}
    answers, settings, weights = module.fit_predict(rows["train"], rows["dev"], rows["test"], labels, **extra)
    seconds = round(time.monotonic() - started, 1)
    return Fitted(module.KIND, module.DESCRIPTION, answers, settings, seconds, weights=weights)
