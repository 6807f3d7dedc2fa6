"""Reading manifests for `paddle-mlops lint`: the YAML files under the given paths, a document's name,
and the parts of an Argo document both lint and `cluster_requirements` walk (its workflow spec and the
manifests its resource templates embed)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from pipelines.train_step import placed_manifest


class LintInputError(Exception):
    """A path or file the linter cannot read; the message says which and why."""


def yaml_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        elif path.is_file():
            yield path
        else:
            raise LintInputError(f"{path} does not exist. Pass a manifest file or a directory such as argo/.")


def load(path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise LintInputError(
            f"{path} is not valid YAML ({exc}). Fix it or regenerate it with `paddle-mlops compile`."
        ) from None
    return [d for d in docs if isinstance(d, dict)]


def document_name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind', '?')}/{meta.get('name') or meta.get('generateName') or '?'}"


def workflow_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The spec holding an Argo document's templates: a CronWorkflow's `workflowSpec`, else `spec`."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronWorkflow":
        return spec.get("workflowSpec") or {}
    return spec


def resource_manifest(template: dict[str, Any]) -> dict[str, Any] | None:
    """The object an Argo template creates: a resource template's `manifest`, or the training job a train step
    places (pipelines/train_step.py placed_manifest); None for other templates, or a manifest that is not one YAML
    mapping."""
    try:
        placed = placed_manifest(template)
    except yaml.YAMLError:
        return None
    if placed is not None:
        return placed
    manifest = (template.get("resource") or {}).get("manifest")
    if not isinstance(manifest, str) or not manifest:
        return None
    try:
        embedded = yaml.safe_load(manifest)
    except yaml.YAMLError:
        return None
    return embedded if isinstance(embedded, dict) else None
