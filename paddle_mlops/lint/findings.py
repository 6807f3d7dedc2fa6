"""What `paddle-mlops lint` reports: a Finding per broken rule, collected over documents and files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from paddle_mlops.lint.controller_settings import settings_documents
from paddle_mlops.lint.documents import LintInputError, document_name, load, yaml_files
from paddle_mlops.lint.events_images import EventsImages, events_images
from paddle_mlops.lint.executor import controller_executor
from paddle_mlops.lint.pods import pods_of
from paddle_mlops.lint.rules import check_pod
from paddle_mlops.lint.trainjob import runtimes_in
from paddle_mlops_core.config import ConfigError, load_config


@dataclass(frozen=True)
class Finding:
    file: str
    document: str
    container: str
    rule: str
    message: str
    fix: str


@lru_cache(maxsize=8)
def digests_required(env: str | None) -> bool:
    """Whether `env`'s configuration (`images.require_digest`, set in configs/env/prod.yaml) wants every image
    pinned by digest; no environment wants nothing more than a pinned tag."""
    if env is None:
        return False
    try:
        return load_config(env=env).images.require_digest
    except ConfigError as exc:
        raise LintInputError(f"--env {env}: {exc}") from None


def lint_documents(
    docs: Iterable[dict[str, Any]],
    file: str = "-",
    env: str | None = None,
    executor: dict[str, Any] | None = None,
    runtimes: dict[str, Any] | None = None,
    events: EventsImages | None = None,
) -> list[Finding]:
    """Findings for `docs`; Argo's executor containers get `executor`, or the controller ConfigMap's
    setting when one is among `docs`, or none (upstream's default); Argo Events' pods get `events`, or the settings
    among `docs`, or upstream's defaults."""
    docs = list(docs)
    if executor is None:
        executor = controller_executor(docs)
    if runtimes is None:
        runtimes = runtimes_in(docs)
    if events is None:
        events = events_images(docs)
    findings = []
    for doc in docs:
        for pod in pods_of(doc, executor, runtimes, events):
            for container, rule, message, fix in check_pod(pod, prod=digests_required(env)):
                findings.append(Finding(file, document_name(doc), container, rule, message, fix))
    return findings


def lint_paths(paths: Sequence[str | Path], env: str | None = None) -> list[Finding]:
    """Every finding in the YAML files under `paths`; an `env` whose configuration sets `images.require_digest`
    (prod) also requires image digests, real ones (not the overlay's placeholder)."""
    loaded = [(path, load(path)) for path in yaml_files(paths)]
    every = [doc for _, docs in loaded for doc in docs]
    # The controllers' settings apply to the pods of every file linted with them: those among the files, else the
    # ones the environment ships (a rendered overlay holds none: they are patched in on their own; see
    # lint/controller_settings.py).
    settings = every + settings_documents(every, env)
    executor = controller_executor(settings)
    events = events_images(settings)
    # So are the training runtimes a TrainJob names (argo/training-runtime.yaml beside train-deploy.yaml).
    runtimes = runtimes_in(every)
    findings = []
    for path, docs in loaded:
        findings += lint_documents(docs, str(path), env, executor, runtimes, events)
    return findings
