"""Kubernetes pieces every generated pod shares, each with the reason it exists.

Hera models for the Argo templates; `as_k8s()` turns the same models into plain dicts for the
PaddleJob manifest, so the workflow pods and the training pods cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from hera.workflows import EmptyDirVolume, Resources, RetryStrategy
from hera.workflows import models as m

from paddle_mlops_core.config import ConfigError, PipelineConfig, load_regions, load_teams
from paddle_mlops_core.config.placement import allowed_regions
from paddle_mlops_core.config.region_store_rules import credential_secrets
from paddle_mlops_core.config.regions import RegionConfig
from paddle_mlops_core.config.teams import TeamConfig
from paddle_mlops_core.contracts import (
    FINAL_EXIT_CODES,
    LOG_FORMAT_ENV,
    LOG_FORMAT_JSON,
    PRETRAINED_MOUNT,
    QUIET_LIBRARIES_ENV,
    RUN_AS_GROUP,
    RUN_AS_USER,
    STORE_CREDENTIAL_KEYS,
    pvc_location,
    store_credentials_env,
)

# The images put the project here; contracts.md runs every step from the project root.
PROJECT_DIR = "/app"

# Tools steps (data, evaluate, upload, register, rollout) are light; bounded so one bad run
# cannot starve the namespace quota.
TOOLS_RESOURCES = Resources(cpu_request="500m", cpu_limit="2", memory_request="1Gi", memory_limit="4Gi")
BUILD_RESOURCES = Resources(cpu_request="1", cpu_limit="4", memory_request="2Gi", memory_limit="8Gi")
EXIT_RESOURCES = Resources(cpu_request="100m", cpu_limit="500m", memory_request="256Mi", memory_limit="512Mi")


def as_k8s(model: Any) -> Any:
    """A Hera/Kubernetes model (or list of them) as the camelCase dict the API server expects."""
    if isinstance(model, list):
        return [as_k8s(item) for item in model]
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def pod_security_context() -> m.PodSecurityContext:
    """Pod Security Standard 'restricted': non-root, fixed ids, default seccomp filter."""
    return m.PodSecurityContext(
        run_as_non_root=True,
        run_as_user=RUN_AS_USER,
        run_as_group=RUN_AS_GROUP,
        # fsGroup makes emptyDir and secret volumes readable by the non-root user.
        fs_group=RUN_AS_GROUP,
        seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
    )


def container_security_context(read_only_root: bool = True) -> m.SecurityContext:
    """No privilege escalation, no capabilities, immutable image filesystem (writes go to /tmp)."""
    return m.SecurityContext(
        allow_privilege_escalation=False,
        capabilities=m.Capabilities(drop=["ALL"]),
        read_only_root_filesystem=read_only_root,
        run_as_non_root=True,
        run_as_user=RUN_AS_USER,
        seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
    )


def tmp_volume() -> EmptyDirVolume:
    """readOnlyRootFilesystem needs one writable place: /tmp (HOME, caches, /tmp/outputs)."""
    return EmptyDirVolume(name="tmp", mount_path="/tmp")


def shm_volume(size: str) -> EmptyDirVolume:
    """NCCL and the DataLoader share tensors through /dev/shm, whose container default is 64Mi."""
    return EmptyDirVolume(name="dshm", mount_path="/dev/shm", medium="Memory", size_limit=m.Quantity(size))


def _named(kind: str, field: str, name: str, known: dict[str, Any]) -> Any:
    """`configs/<kind>s/<name>.yaml`, loaded; an unknown name is a config error naming the field."""
    if name not in known:
        raise ConfigError(
            f"{field} '{name}' has no file configs/{kind}s/{name}.yaml. "
            f"Known {kind}s: {', '.join(sorted(known)) or 'none'}."
        )
    return known[name]


def region_config(cfg: PipelineConfig) -> RegionConfig:
    """`configs/regions/<cluster.region>.yaml`: node labels and tolerations of the run's region."""
    return _named("region", "cluster.region", cfg.cluster.region, load_regions())


def team_config(cfg: PipelineConfig) -> TeamConfig:
    """`configs/teams/<cluster.team>.yaml`: priority class and quota of the submitting team."""
    return _named("team", "cluster.team", cfg.cluster.team, load_teams())


def training_regions(cfg: PipelineConfig) -> list[RegionConfig]:
    """The regions this run's training may be admitted in, in the team's preference order
    (paddle_mlops_core/config/placement.py: team quota, exclusions, data locality)."""
    return allowed_regions(cfg, team_config(cfg), load_regions())


def gpu_tolerations(region: RegionConfig) -> list[m.Toleration]:
    """GPU nodes are tainted so that only pods asking for them land there."""
    return [m.Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect) for t in region.tolerations]


def gpu_node_selector(region: RegionConfig) -> dict[str, str]:
    """Pin training to the region's GPU type and cost tier (node labels set by the cluster admins)."""
    return region.node_selector()


def _secret_env(name: str, secret: str, key: str) -> m.EnvVar:
    return m.EnvVar(name=name, value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name=secret, key=key)))


def store_credentials(cfg: PipelineConfig) -> list[m.EnvVar]:
    """The pipeline store's keys (storage.credentials_secret), then each region's own store's under that region's
    names (contracts.store_credentials_env): a step or training pod reads and writes several stores (the rollout
    copies a model into every region's, a run reads weights from the region it trains in), each with its own keys."""
    env = [_secret_env(key, cfg.storage.credentials_secret, key) for key in STORE_CREDENTIAL_KEYS]
    for region, secret in credential_secrets(cfg, load_regions().values()).items():
        env += [_secret_env(name, secret, key) for key, name in store_credentials_env(region).items()]
    return env


def runtime_env(cfg: PipelineConfig, git_sha: str) -> list[m.EnvVar]:
    """Credentials only by Secret reference; endpoints are not secrets and come from config.
    `git_sha` is the Argo expression of the commit the template records (see step_container.COMMIT)."""
    env = store_credentials(cfg)
    env.append(m.EnvVar(name="AWS_DEFAULT_REGION", value=cfg.storage.region))
    if cfg.storage.endpoint_url:
        env.append(m.EnvVar(name="S3_ENDPOINT_URL", value=cfg.storage.endpoint_url))
    if cfg.mlflow.tracking_uri:
        env.append(m.EnvVar(name="MLFLOW_TRACKING_URI", value=cfg.mlflow.tracking_uri))
    # The root filesystem is read-only; libraries that cache under $HOME must write to /tmp.
    env.append(m.EnvVar(name="HOME", value="/tmp"))
    env.append(m.EnvVar(name="PYTHONPATH", value=PROJECT_DIR))
    env.append(m.EnvVar(name="GIT_SHA", value=git_sha))
    # One JSON object per line with the run's workflow, step, task, run id and rank: what a log stack (Fluent Bit,
    # Loki) indexes, and what the archived logs hold (docs/observability.md "Logs"). Local runs keep plain lines.
    env.append(m.EnvVar(name=LOG_FORMAT_ENV, value=LOG_FORMAT_JSON))
    # Quiet before Python starts: the PaddleJob's launcher imports Paddle before any step module could filter.
    env += [m.EnvVar(name=name, value=value) for name, value in QUIET_LIBRARIES_ENV.items()]
    return env


def retry_expression() -> str:
    """Argo `retryStrategy.expression`: false for the exit codes a retry cannot change.

    Argo (workflow/controller/operator.go, buildRetryStrategyLocalScope) passes `lastRetry.exitCode`
    as a string, "-1" when the pod left none (deleted, evicted): those are retried.
    """
    return " && ".join(f"asInt(lastRetry.exitCode) != {code}" for code in FINAL_EXIT_CODES)


def retry_strategy(cfg: PipelineConfig) -> RetryStrategy:
    """Retry transient failures with capped backoff, never a user error (2) or a rollback (3)."""
    return RetryStrategy(
        limit=cfg.cluster.retry_limit,
        retry_policy="Always",
        expression=retry_expression(),
        backoff=m.Backoff(duration="30s", factor=2, max_duration="30m"),
    )


def resource_retry_strategy(cfg: PipelineConfig) -> RetryStrategy:
    """A resource template has no exit code: retry only Argo/API errors, the operator retries pods."""
    return RetryStrategy(
        limit=cfg.cluster.retry_limit,
        retry_policy="OnError",
        backoff=m.Backoff(duration="1m", factor=2, max_duration="30m"),
    )


def pretrained_volume(cfg: PipelineConfig) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(pod volume, container volumeMount) for `model.pretrained: pvc://CLAIM/...`, both read-only;
    None for weights in a directory of the image or on S3. Every worker reads the same files."""
    location = pvc_location(cfg.model.pretrained or "")
    if location is None:
        return None
    claim, _ = location
    volume = {"name": "pretrained", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    mount = {"name": "pretrained", "mountPath": f"{PRETRAINED_MOUNT}/{claim}", "readOnly": True}
    return volume, mount
