"""Which controller settings `lint --env ENV` models the controller-added containers with, when the linted files hold
none: the rendered install set (`kubectl kustomize overlays/prod`) does not contain them, since they are patched into
the upstream objects on their own (pipelines/platform/controller_settings.py). For ENV the settings it ships are
`overlays/ENV/controller-settings/` (images by the overlay's digests), else `argo/controller-settings/`, both relative
to the working directory (the repository root, as for the default `argo/`). Without --env nothing is added and
upstream's defaults apply (argoexec and argo-events by tag, no executor securityContext).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paddle_mlops.lint.documents import load, yaml_files
from pipelines.platform import argo_controller, events_controller
from pipelines.platform.controller_settings import DIRECTORY

SETTINGS = {
    ("ConfigMap", argo_controller.CONTROLLER_CONFIGMAP),
    ("ConfigMap", events_controller.CONTROLLER_CONFIGMAP),
    ("Deployment", events_controller.DEPLOYMENT),
}


def _is_setting(doc: dict[str, Any]) -> bool:
    return (doc.get("kind"), (doc.get("metadata") or {}).get("name")) in SETTINGS


def settings_directory(env: str, root: Path | None = None) -> Path | None:
    root = root or Path.cwd()
    for candidate in (root / "overlays" / env / DIRECTORY, root / "argo" / DIRECTORY):
        if candidate.is_dir():
            return candidate
    return None


def settings_documents(
    docs: Sequence[dict[str, Any]], env: str | None, root: Path | None = None
) -> list[dict[str, Any]]:
    """The settings documents of `env` when `docs` hold none; [] otherwise."""
    if env is None or any(_is_setting(doc) for doc in docs):
        return []
    directory = settings_directory(env, root)
    if directory is None:
        return []
    return [doc for path in yaml_files([directory]) for doc in load(path) if _is_setting(doc)]
