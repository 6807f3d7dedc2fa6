"""The MLflow model registry as the pipeline uses it: versions, aliases, and closing stray runs.

Aliases carry the deployment state: `challenger` (registered, not yet serving), `champion` (serving
100%), `previous-champion` (what a rollback returns to). Every version carries short tags (git_sha, the split
digests, storage_uri, manifest_digest, task and task_type; steps/runtime/release/model_card.py), a Markdown model
card as its description, and links to its training run and its LoggedModel when they are on this tracking server, so
a version can be traced to its code, data, bytes and task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import mlflow
from mlflow.entities import RunStatus
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from paddle_mlops_core import contracts
from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import CHAMPION, PREVIOUS_CHAMPION
from steps.runtime import config_names
from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import mlflow_repository

# MLflow caps model-version tag values (a validation reason can be long).
_MAX_TAG = 5000
# What the rollout's validate step decided about a version (passed | refused) and why; a version with a verdict
# has been judged, so another notification for it is a duplicate.
VALIDATION_VERDICT = "validation.verdict"
VALIDATION_REASON = "validation.reason"


def tracking_uri(cfg: PipelineConfig) -> str:
    """The pipeline's tracking URI (`contracts.tracking_uri`); makes the folder of a local SQLite store."""
    uri = contracts.tracking_uri(cfg.mlflow.tracking_uri)
    if uri.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(uri[len("sqlite:///") :]) or ".", exist_ok=True)
    return uri


def connect(cfg: PipelineConfig) -> MlflowClient:
    """A client for the pipeline's tracking server; also makes it mlflow's default for this process."""
    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _client(client: MlflowClient | None) -> MlflowClient:
    return client or MlflowClient()


def find_version_by_digest(name: str, manifest_digest: str, client: MlflowClient | None = None) -> str | None:
    client = _client(client)
    found = client.search_model_versions(f"name = '{name}' and tags.manifest_digest = '{manifest_digest}'")
    return str(min(int(v.version) for v in found)) if found else None


def register(
    cfg: PipelineConfig,
    model_uri: str,
    run_id: str | None,
    tags: dict[str, str],
    client: MlflowClient | None = None,
    model_id: str | None = None,
    description: str | None = None,
) -> str:
    """Create (once) the version of `cfg.mlflow.registered_model` for the published `model_uri`, linked to the
    LoggedModel `model_id` (one of this tracking server's: `known_logged_model`) and described by `description`.

    Idempotent: a version already tagged with the same `manifest_digest` is returned as is.
    """
    client = client or connect(cfg)
    name = config_names.registered_model(cfg)
    digest = tags.get("manifest_digest")
    if not digest:
        raise StepError("register needs the manifest_digest tag; pass the upload step's manifest digest")
    try:
        client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(
            name,
            description=f"ERNIE {cfg.model.task} model of task '{cfg.task}', published by paddle-mlops",
            tags={"task": cfg.task, "task_type": cfg.model.task},
        )
    existing = find_version_by_digest(name, digest, client)
    if existing is not None:
        if model_id:
            link_logged_model(name, existing, model_id, model_uri, client)
        return existing
    try:
        version = client.create_model_version(
            name,
            source=mlflow_repository.source_uri(model_uri),
            run_id=run_id or None,
            tags={"storage_uri": model_uri, "task": cfg.task, "task_type": cfg.model.task, **tags},
            description=description,
            model_id=model_id or None,
        )
    except MlflowException as exc:
        if exc.error_code == "INVALID_PARAMETER_VALUE" and "source" in exc.message:
            # A tracking *server* refuses local paths as sources (it cannot read this machine's disk).
            raise StepError(
                f"MLflow at {client.tracking_uri} refuses model source {model_uri!r}: {exc.message} "
                "Use an s3:// storage.uri with a remote tracking server, or the embedded SQLite tracking locally."
            ) from None
        raise
    if model_id:
        link_logged_model(name, str(version.version), model_id, model_uri, client)
    return str(version.version)


def known_logged_model(model_id: str | None, client: MlflowClient | None = None) -> bool:
    """Whether `model_id` is a LoggedModel of this tracking server (a model trained elsewhere names a foreign one)."""
    return bool(model_id) and _found(_client(client).get_logged_model, str(model_id))


def link_logged_model(name: str, version: str, model_id: str, model_uri: str, client: MlflowClient) -> None:
    """The LoggedModel names its registered versions (`mlflow.modelVersions`, what its UI page lists) and the
    published version its bytes are. MLflow's server sets the first on create_model_version with a model_id
    (mlflow/server/handlers.py `_create_model_version`); an embedded store does not, so it is set here, once."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    model = client.get_logged_model(model_id)
    linked = json.loads(model.tags.get(MLFLOW_MODEL_VERSIONS) or "[]")
    entry = {"name": name, "version": int(version)}  # as MLflow's server writes it
    tags = {"published_uri": model_uri}
    if not any(str(e.get("name")) == name and str(e.get("version")) == str(version) for e in linked):
        tags[MLFLOW_MODEL_VERSIONS] = json.dumps([*linked, entry])
    client.set_logged_model_tags(model_id, tags)


def set_tags(name: str, version: str, tags: dict[str, str], client: MlflowClient | None = None) -> None:
    """Set (or overwrite) tags of an existing version; values are cut to MLflow's limit."""
    client = _client(client)
    for key, value in tags.items():
        text = str(value)
        client.set_model_version_tag(name, str(version), key, text if len(text) <= _MAX_TAG else text[:_MAX_TAG])


def known_run(run_id: str, client: MlflowClient | None = None) -> bool:
    """Whether `run_id` is a run of this tracking server (a model trained elsewhere names a foreign one)."""
    return bool(run_id) and _found(_client(client).get_run, run_id)


def _found(get: Callable[[str], object], key: str) -> bool:
    """Whether the tracking server answers `get(key)` (an MLflow error: it has no such entity)."""
    try:
        get(key)
    except MlflowException:
        return False
    return True


def set_alias(name: str, alias: str, version: str, client: MlflowClient | None = None) -> None:
    _client(client).set_registered_model_alias(name, alias, str(version))


def get_alias_version(name: str, alias: str, client: MlflowClient | None = None) -> str | None:
    """The version an alias points at, or None when the alias (or the model) does not exist."""
    try:
        return str(_client(client).get_model_version_by_alias(name, alias).version)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def promote(name: str, version: str, client: MlflowClient | None = None) -> str | None:
    """Point `champion` at `version`; the old champion becomes `previous-champion`. Returns it."""
    client = _client(client)
    version = str(version)
    current = get_alias_version(name, CHAMPION, client)
    if current == version:
        return get_alias_version(name, PREVIOUS_CHAMPION, client)
    if current is not None:
        client.set_model_version_tag(name, version, "previous_champion", current)
        client.set_registered_model_alias(name, PREVIOUS_CHAMPION, current)
    client.set_registered_model_alias(name, CHAMPION, version)
    return current


def close_runs(workflow: str, status: str = "FAILED", client: MlflowClient | None = None) -> list[str]:
    """Terminate the runs tagged `workflow=<workflow>` that are still RUNNING, in any experiment; their ids."""
    client = _client(client)
    if status not in (RunStatus.to_string(RunStatus.FINISHED), "FAILED", "KILLED"):
        raise StepError(f"run status {status!r} is not one of FINISHED, FAILED, KILLED")
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    runs = client.search_runs(
        experiments,
        filter_string=f"tags.workflow = '{workflow}' and attributes.status = 'RUNNING'",
    )
    closed = []
    for run in runs:
        client.set_terminated(run.info.run_id, status=status)
        closed.append(run.info.run_id)
    return closed
