"""Where Argo archives the steps' logs: the artifact repository of each namespace our workflows run in.

`podGC: OnWorkflowSuccess` deletes a succeeded workflow's pods, and their logs with them. Every workflow spec says
`archiveLogs: true` and names this repository (pipelines/workflow_spec.py), so the `wait` container uploads each
pod's `main` log, when the step ends, to the object store the steps already use (`storage.workspace`'s bucket on
`storage.endpoint_url`, with `storage.credentials_secret`), at `<workspace>/<workflow>/logs/<pod>/main.log`.

One namespaced ConfigMap `artifact-repositories` per namespace (the pipeline namespace and every team's), never the
controller's own configuration: argo-workflows v4.1.2 workflow/artifactrepositories/artifactrepositories.go resolves
a workflow's `artifactRepositoryRef` in the workflow's namespace first, then in the controller's; the annotation
`workflows.argoproj.io/default-artifact-repository` names the key a reference without one reads.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import yaml

from paddle_mlops_core.config import ConfigError, PipelineConfig, TeamConfig
from paddle_mlops_core.contracts import ARCHIVED_LOGS, ARTIFACT_REPOSITORIES, ARTIFACT_REPOSITORY_KEY
from pipelines.platform.meta import metadata

DEFAULT_REPOSITORY_ANNOTATION = "workflows.argoproj.io/default-artifact-repository"
# Argo's own variables, substituted per pod when the executor's archive location is built (workflowpod.go
# substitutePodParams): the workflow's name and the pod's.
KEY_FORMAT = "{{workflow.name}}/" + ARCHIVED_LOGS + "/{{pod.name}}"
AWS_ENDPOINT = "s3.amazonaws.com"


def s3_repository(cfg: PipelineConfig) -> dict[str, Any]:
    """The S3 repository (ArtifactRepository in Argo's types) the logs are archived to."""
    workspace = cfg.storage.workspace
    parsed = urlparse(workspace)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ConfigError(
            f"storage.workspace is {workspace!r}: Argo archives the steps' logs in the workspace's bucket, so on a "
            "cluster it must be an s3://bucket/prefix URI (configs/pipeline.yaml)"
        )
    prefix = parsed.path.strip("/")
    endpoint = urlparse(cfg.storage.endpoint_url) if cfg.storage.endpoint_url else None
    return {
        "archiveLogs": True,
        "s3": {
            "bucket": parsed.netloc,
            # Argo's S3 client takes host:port, and plain HTTP only when told (`insecure`): MinIO in the cluster.
            "endpoint": endpoint.netloc if endpoint else AWS_ENDPOINT,
            "insecure": bool(endpoint and endpoint.scheme == "http"),
            "region": cfg.storage.region,
            "keyFormat": f"{prefix}/{KEY_FORMAT}" if prefix else KEY_FORMAT,
            "accessKeySecret": {"name": cfg.storage.credentials_secret, "key": "AWS_ACCESS_KEY_ID"},
            "secretKeySecret": {"name": cfg.storage.credentials_secret, "key": "AWS_SECRET_ACCESS_KEY"},
        },
    }


def artifact_repositories(namespace: str, repository: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            ARTIFACT_REPOSITORIES, namespace, annotations={DEFAULT_REPOSITORY_ANNOTATION: ARTIFACT_REPOSITORY_KEY}
        ),
        "data": {ARTIFACT_REPOSITORY_KEY: yaml.safe_dump(repository, sort_keys=False)},
    }


def render(cfg: PipelineConfig, teams: dict[str, TeamConfig]) -> list[dict[str, Any]]:
    """One `artifact-repositories` ConfigMap in the pipeline namespace and in each team's."""
    repository = s3_repository(cfg)
    namespaces = dict.fromkeys([cfg.cluster.namespace, *(t.namespace for t in teams.values())])
    return [artifact_repositories(ns, repository) for ns in namespaces]
