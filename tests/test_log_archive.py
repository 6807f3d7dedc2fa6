"""Logs that outlive their pods: every compiled workflow archives its steps' logs and logs JSON, the namespace's
artifact repository says where, and `paddle-mlops logs` reads them from exactly there.

Upstream behaviour encoded here (argoproj/argo-workflows v4.1.2):
- workflow/artifactrepositories/artifactrepositories.go Resolve/get: a workflow's `artifactRepositoryRef` is looked
  up as ConfigMap `ref.configMap` (default `artifact-repositories`) in the workflow's namespace, then in the
  controller's; the key is `ref.key`, else the ConfigMap's `workflows.argoproj.io/default-artifact-repository`
  annotation; a missing ConfigMap or key moves on to the next, none left fails the workflow.
- workflow/controller/workflowpod.go IsArchiveLogs: controller(on) > template > workflow > controller(off);
  addArchiveLocation: a template without its own location gets the repository's `ToArtifactLocation()`.
- pkg/apis/workflow/v1alpha1/artifact_repository_types.go S3ArtifactRepository.IntoArtifactLocation: the key is
  `keyFormat`, else `path.Join(keyPrefix, "{{workflow.name}}/{{pod.name}}")`; workflowpod.go substitutePodParams
  fills the workflow's variables and `pod.name`.
- workflow/executor/executor.go SaveLogs/saveContainerLogs/saveArtifactFromFile: each main container's log is
  uploaded as `<key>/<container>.log`, i.e. `<key>/main.log`.
- workflow/util/pod_name.go GeneratePodName (v2): `<workflow>-<template>-<fnv32a(node name)>`.
"""

from __future__ import annotations

import copy
import json
import posixpath
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from paddle_mlops import logs
from paddle_mlops_core.contracts import (
    ARCHIVED_LOG_FILE,
    ARTIFACT_REPOSITORIES,
    LOG_FORMAT_ENV,
    LOG_FORMAT_JSON,
    TRAINING_JOB_ENV,
)
from pipelines.platform import log_archive
from pipelines.train_step import placed_manifest

ARGO = Path(__file__).resolve().parents[1] / "argo"
ARGO_SCHEMA = Path("/work/shared/schemas/argo-workflows.schema.json")
DEFAULT_ANNOTATION = "workflows.argoproj.io/default-artifact-repository"
DEFAULT_ARCHIVE_PATTERN = "{{workflow.name}}/{{pod.name}}"
POD_TEMPLATE_TYPES = ("container", "script", "containerSet", "resource", "data")


def _docs() -> list[dict[str, Any]]:
    found = []
    for path in sorted(ARGO.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    return found


def _workflow_specs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(metadata, workflow spec) of every WorkflowTemplate and CronWorkflow the install set ships."""
    specs = []
    for doc in _docs():
        if doc.get("kind") == "WorkflowTemplate":
            specs.append((doc["metadata"], doc["spec"]))
        elif doc.get("kind") == "CronWorkflow":
            specs.append((doc["metadata"], doc["spec"]["workflowSpec"]))
    return specs


def _config_maps() -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d
        for d in _docs()
        if d.get("kind") == "ConfigMap" and d["metadata"].get("namespace")
    }


def resolve(ref: dict[str, Any] | None, namespace: str, controller_namespace: str = "argo") -> dict[str, Any] | None:
    """artifactrepositories.go Resolve + get over the install set's ConfigMaps (the controller's default repository,
    `Default: true`, is what a workflow without a ref falls back to: None here, we ship none)."""
    maps = _config_maps()
    candidates = [namespace, controller_namespace] if ref is not None else [namespace]
    for ns in candidates:
        cm = maps.get((ns, (ref or {}).get("configMap") or ARTIFACT_REPOSITORIES))
        if cm is None:
            continue
        key = (ref or {}).get("key") or (cm["metadata"].get("annotations") or {}).get(DEFAULT_ANNOTATION, "")
        if key not in cm.get("data", {}):
            continue
        return yaml.safe_load(cm["data"][key])
    if ref is not None:
        raise LookupError(f"failed to find any artifact repository for artifact repository ref {ref}")
    return None


def is_archive_logs(repository: dict[str, Any] | None, spec: dict[str, Any], template: dict[str, Any]) -> bool:
    """workflowpod.go IsArchiveLogs: controller(on) > template > workflow > controller(off)."""
    if repository and repository.get("archiveLogs"):
        return True
    archive = spec.get("archiveLogs", False)
    location = template.get("archiveLocation") or {}
    if "archiveLogs" in location:
        archive = location["archiveLogs"]
    return bool(archive)


def archived_log_key(repository: dict[str, Any], workflow: str, pod: str) -> str:
    """The object key executor.go writes the `main` container's log to."""
    s3 = repository["s3"]
    key = s3.get("keyFormat") or posixpath.join(s3.get("keyPrefix", ""), DEFAULT_ARCHIVE_PATTERN)
    key = key.replace("{{workflow.name}}", workflow).replace("{{pod.name}}", pod)
    return posixpath.join(key, "main" + ".log")


def pod_name(workflow: str, template: str, node_name: str) -> str:
    """pod_name.go GeneratePodName, v2."""
    digest = 0x811C9DC5
    for byte in node_name.encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{workflow}-{template}-{digest}"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def _containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers a template runs its code in: its own, and the training job's workers it places."""
    found = [template[kind] for kind in ("container", "script") if kind in template]
    found += list((template.get("containerSet") or {}).get("containers", []))
    job = placed_manifest(template)
    if job is not None:
        trainer = job["spec"].get("trainer")
        if trainer:  # a TrainJob: the runtime's node container gets trainer.env
            found.append({"name": "trainjob-node", "env": trainer.get("env")})
        for replica in (job["spec"].get("paddleReplicaSpecs") or job["spec"]).values():
            if isinstance(replica, dict) and "template" in replica:
                found += replica["template"]["spec"]["containers"]
    return found


def test_every_compiled_template_archives_its_logs_and_sets_json_logging() -> None:
    specs = _workflow_specs()
    assert {m["name"] for m, _ in specs} >= {"train-deploy", "rollout", "finetune-batch", "scheduled-retrain"}
    checked_containers = 0
    for meta, spec in specs:
        repository = resolve(spec.get("artifactRepositoryRef"), meta["namespace"])
        assert repository is not None, meta["name"]
        assert spec.get("archiveLogs") is True, meta["name"]
        for template in spec.get("templates", []):
            if any(kind in template for kind in POD_TEMPLATE_TYPES):
                assert is_archive_logs(repository, spec, template), f"{meta['name']}/{template['name']}"
                # No template location of its own: addArchiveLocation gives it the repository's.
                assert not (template.get("archiveLocation") or {}).keys() - {"archiveLogs"}
            for container in _containers(template):
                assert _env(container).get(LOG_FORMAT_ENV) == LOG_FORMAT_JSON, f"{template['name']}: {container}"
                checked_containers += 1
    assert checked_containers >= 20
    train = next(t for _, s in specs for t in s.get("templates", []) if t["name"] == "train")
    assert any(c.get("name") == "trainjob-node" for c in _containers(train)), "the training workers log JSON too"
    assert TRAINING_JOB_ENV in _env(train["container"])


def test_resolution_finds_the_repository_in_the_workflow_namespace_and_fails_without_it() -> None:
    ref = {"configMap": ARTIFACT_REPOSITORIES, "key": "paddle-mlops"}
    assert resolve(ref, "ml-pipelines")["archiveLogs"] is True
    assert resolve(None, "team-nlp") is not None, "the annotation names the default key"
    with pytest.raises(LookupError):
        resolve(ref, "a-namespace-without-it")


def test_the_repository_is_what_argo_parses_strictly() -> None:
    definitions = json.loads(ARGO_SCHEMA.read_text())["definitions"]
    strict = copy.deepcopy(definitions)
    for definition in strict.values():
        if definition.get("type") == "object" and "properties" in definition:
            definition["additionalProperties"] = False
    schema = {"$ref": "#/definitions/io.argoproj.workflow.v1alpha1.ArtifactRepository", "definitions": strict}
    ref_schema = {"$ref": "#/definitions/io.argoproj.workflow.v1alpha1.ArtifactRepositoryRef", "definitions": strict}
    cms = [cm for (_, name), cm in _config_maps().items() if name == ARTIFACT_REPOSITORIES]
    assert {cm["metadata"]["namespace"] for cm in cms} >= {"ml-pipelines", "team-nlp", "team-search"}
    for cm in cms:
        for value in cm["data"].values():
            jsonschema.Draft7Validator(schema).validate(yaml.safe_load(value))
    for _, spec in _workflow_specs():
        jsonschema.Draft7Validator(ref_schema).validate(spec["artifactRepositoryRef"])
    repository = resolve(None, "ml-pipelines")
    assert repository["s3"]["endpoint"] == "minio.minio.svc:9000" and repository["s3"]["insecure"] is True
    assert repository["s3"]["accessKeySecret"] == {"name": "minio-credentials", "key": "AWS_ACCESS_KEY_ID"}


def test_the_executor_writes_each_step_log_where_paddle_mlops_logs_reads_it() -> None:
    repository = resolve({"configMap": ARTIFACT_REPOSITORIES, "key": "paddle-mlops"}, "ml-pipelines")
    workflow = "train-deploy-x7k2p"
    for template, node in [("prepare-data", f"{workflow}.prepare-data"), ("train-cache", f"{workflow}.train-cache(0)")]:
        pod = pod_name(workflow, template, node)
        key = archived_log_key(repository, workflow, pod)
        bucket = repository["s3"]["bucket"]
        prefix = logs.archived_logs_prefix("s3://paddle-mlops/runs", workflow)
        assert f"s3://{bucket}/{key}" == f"{prefix}/{pod}/{ARCHIVED_LOG_FILE}"
        assert logs.step_of_pod(workflow, pod) == template


def test_a_cluster_workspace_that_is_not_s3_is_refused_with_the_field(project_root: Path) -> None:
    from paddle_mlops_core.config import ConfigError, load_config

    cfg = load_config(project_root / "configs/pipeline.yaml", overrides=["storage.workspace=/data/runs"])
    with pytest.raises(ConfigError, match=r"storage\.workspace"):
        log_archive.s3_repository(cfg)
