"""`paddle-mlops submit`: start a run from a WorkflowTemplate, as `argo submit --from` does.

Before submitting, Kueue is read (paddle_mlops/queue_state.py, queue_placement.py): the ClusterQueue behind the
namespace's LocalQueue, its flavors' quota and reservations, the pending Workloads. When no region the run may
use can ever hold its training job's GPUs (workers × gpus_per_worker), nothing is submitted (exit 3, saying each
region's limit and what to change); otherwise the run is submitted and the message says in which region it would
be admitted now, or at which position it waits. A finetune-batch's branches train at once: each is one job, and
the room now is counted for all of them. The legacy PaddleJob backends, which Kueue does not admit, are checked
against the namespace's ResourceQuota instead. `--task NAME` sets the
`task` parameter; `submit finetune-batch --task a --task b` builds its `tasks` list. `--dry-run` prints the
Workflow without touching the cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from paddle_mlops.command_line import add_config_args, exit_status
from paddle_mlops.queue_placement import NEVER, Placement, place
from paddle_mlops.queue_state import KueueApi, read_state
from paddle_mlops_core.config import ConfigError, PipelineConfig, load_config
from paddle_mlops_core.config.placement import refuse_run_time_placement
from paddle_mlops_core.config.tasks import DEFAULT_TASK
from paddle_mlops_core.contracts import EXIT_API, EXIT_NO_CAPACITY, EXIT_USAGE

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "workflows"
GPU_QUOTA_KEY = "requests.nvidia.com/gpu"
# The quota `pipelines/platform/tenancy.py` installs in every namespace that runs training.
QUOTA_NAME = "compute-quota"


class QuotaExceeded(Exception):
    """The run can never be admitted (Kueue), or the namespace's GPU quota cannot hold it (legacy); nothing was
    submitted."""


class NoLocalQueue(Exception):
    """The namespace has no Kueue LocalQueue for training: the install set is not applied there."""


@dataclass(frozen=True)
class GpuRoom:
    hard: int
    used: int

    @property
    def free(self) -> int:
        return self.hard - self.used


class KubernetesApi:
    """The two calls `submit` makes, over the official client (kubeconfig, else in-cluster)."""

    def __init__(self) -> None:
        from kubernetes import client, config

        try:
            config.load_kube_config()
        except config.ConfigException:
            config.load_incluster_config()
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.kueue = KueueApi(self.custom)

    def read_namespaced_resource_quota(self, name: str, namespace: str) -> Any:
        return self.core.read_namespaced_resource_quota(name, namespace)

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any]
    ) -> Any:
        return self.custom.create_namespaced_custom_object(group, version, namespace, plural, body)


def workflow(template: str, params: dict[str, str], namespace: str) -> dict[str, Any]:
    """The Workflow `argo submit --from workflowtemplate/<template> -p k=v` creates."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workflow",
        "metadata": {"generateName": f"{template}-", "namespace": namespace},
        "spec": {
            "workflowTemplateRef": {"name": template},
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in params.items()]},
        },
    }


def _field(obj: Any, name: str) -> Any:
    """Read a field from the client's model objects or from plain dicts (stand-ins, JSON)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def gpu_room(quota: Any) -> GpuRoom | None:
    """GPUs hard/used from a ResourceQuota's status; None when it does not limit GPUs."""
    from kubernetes.utils import parse_quantity

    status = _field(quota, "status") or {}
    hard = _field(status, "hard") or {}
    if GPU_QUOTA_KEY not in hard:
        return None
    used = (_field(status, "used") or {}).get(GPU_QUOTA_KEY, "0")
    return GpuRoom(int(parse_quantity(hard[GPU_QUOTA_KEY])), int(parse_quantity(used)))


def check_gpu_quota(api: Any, namespace: str, gpus: int) -> GpuRoom | None:
    """Raise QuotaExceeded when `gpus` do not fit; None when the namespace has no such quota."""
    from kubernetes.client.exceptions import ApiException

    if gpus <= 0:
        return None
    try:
        quota = api.read_namespaced_resource_quota(QUOTA_NAME, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    room = gpu_room(quota)
    if room is not None and room.free < gpus:
        raise QuotaExceeded(
            f"namespace {namespace}: ResourceQuota {QUOTA_NAME} has {max(room.free, 0)} of {room.hard} GPUs free "
            f"({room.used} in use) but the run needs {gpus}. Wait for running jobs to finish, lower "
            "training.job.workers or gpus_per_worker (--set), or raise the team's quota.gpu in configs/teams/."
        )
    return room


@dataclass(frozen=True)
class KueueRun:
    """What Kueue is asked about a run: one training job's GPUs, how many jobs start at once, where and how urgent."""

    gpus: int
    jobs: int
    regions: list[str]
    priority: int


def check_kueue(api: Any, namespace: str, run: KueueRun) -> Placement | None:
    """Where Kueue would put the run; raise QuotaExceeded when it never could. None for a run without GPUs."""
    from pipelines.platform.kueue import LOCAL_QUEUE

    if run.gpus <= 0:
        return None
    local = {(q["metadata"].get("namespace"), q["metadata"]["name"]): q for q in api.kueue.local_queues()}
    queue = local.get((namespace, LOCAL_QUEUE))
    if queue is None:
        raise NoLocalQueue(
            f"namespace {namespace} has no Kueue LocalQueue {LOCAL_QUEUE!r}, so its TrainJob would never be admitted. "
            "Apply the install set (kubectl apply -f argo/kueue.yaml) or submit to a team namespace (-n)."
        )
    cluster_queue = queue["spec"]["clusterQueue"]
    state = read_state(api.kueue)
    one = place(state, cluster_queue, run.gpus, run.regions, run.priority)
    if one.verdict == NEVER:
        raise QuotaExceeded(one.message)
    return place(state, cluster_queue, run.gpus * run.jobs, run.regions, run.priority) if run.jobs > 1 else one


def submit(
    template: str,
    params: dict[str, str],
    namespace: str,
    dry_run: bool,
    api: Any = None,
    *,
    gpus: int = 0,
    kueue: KueueRun | None = None,
) -> tuple[dict[str, Any], Placement | None]:
    """Create the Workflow (or only build it when `dry_run`): the created (or built) object, and where Kueue would
    admit the run (`kueue`; without it the namespace ResourceQuota is checked for `gpus`)."""
    body = workflow(template, params, namespace)
    if dry_run:
        return body, None
    api = api or KubernetesApi()
    placement = None
    if kueue is not None:
        placement = check_kueue(api, namespace, kueue)
    else:
        check_gpu_quota(api, namespace, gpus)
    created = api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    return (created if isinstance(created, dict) else body), placement


def requested_gpus(cfg: PipelineConfig) -> int:
    job = cfg.training.job
    return job.workers * job.gpus_per_worker


def parse_params(items: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"-p {item!r} is not of the form NAME=VALUE (for example -p git-sha=abc123).")
        params[name] = value
    return params


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="paddle-mlops submit",
        description=(
            "Submit a run of a WorkflowTemplate (like `argo submit --from workflowtemplate/NAME`). Kueue is read "
            "first: the run is submitted with the region it would be admitted in now, or its position in the queue; "
            "when no "
            "region it may use can ever hold its GPUs nothing is submitted (exit 3). Legacy PaddleJob backends are "
            "checked against the namespace ResourceQuota."
        ),
    )
    p.add_argument("template", nargs="?", default="train-deploy", help="WorkflowTemplate name (default train-deploy)")
    p.add_argument(
        "-p",
        "--parameter",
        dest="params",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="workflow parameter (repeatable)",
    )
    p.add_argument("-n", "--namespace", default=None, help="namespace (default: cluster.namespace from the config)")
    p.add_argument("--dry-run", action="store_true", help="print the Workflow YAML; no API call")
    # The configuration sizes the GPU request; --task sets the `task` parameter, or for finetune-batch (repeated)
    # its `tasks` list, with --set overrides (`--set NAME:a.b=c` for one task).
    add_config_args(p, several_tasks=True)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, api: Any = None) -> int:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    args = _parse_args(argv)
    errors = (
        (ConfigError, EXIT_USAGE, "submit: {exc}"),
        (QuotaExceeded, EXIT_NO_CAPACITY, "submit: not submitted: {exc}"),
        (NoLocalQueue, EXIT_API, "submit: not submitted: {exc}"),
        (
            ConfigException,
            EXIT_API,
            "submit: no Kubernetes credentials ({exc}). Set KUBECONFIG or run inside the cluster.",
        ),
        (
            ApiException,
            EXIT_API,
            "submit: the Kubernetes API refused the request ({exc.status} {exc.reason}). "
            "Check that the namespace exists and that your account may create workflows there.",
        ),
    )
    return exit_status(lambda: _submit(args, api), errors)


def task_parameters(args: argparse.Namespace, params: dict[str, str]) -> tuple[dict[str, str], int]:
    """The parameters --task adds (`task`, or finetune-batch's `tasks` list), and how many training jobs the run
    starts at once (one per branch of a batch)."""
    from paddle_mlops import batch
    from pipelines import finetune_batch

    if args.template == finetune_batch.NAME:
        if "tasks" in params:
            try:
                return params, len(json.loads(params["tasks"])) or 1
            except (json.JSONDecodeError, TypeError):
                raise ConfigError(
                    f"-p tasks={params['tasks']!r} is not a JSON list; use --task NAME (repeatable) instead."
                ) from None
        items = batch.batch_items(args.tasks or [DEFAULT_TASK], args.overrides, args.config, args.env)
        return {**params, "tasks": batch.as_parameter(items)}, len(items)
    if len(args.tasks) > 1:
        raise ConfigError(f"several --task run as one batch: submit {finetune_batch.NAME}, not {args.template}.")
    if args.tasks:
        params = {"task": args.tasks[0], **params}
    if args.overrides:  # --set reaches the run's steps (after any -p overrides), not only the GPU check
        params = {**params, "overrides": json.dumps([*listed_overrides(params), *args.overrides])}
    return params, 1


def listed_overrides(params: dict[str, str]) -> list[str]:
    """The `-p overrides=[...]` list, [] when not given."""
    if "overrides" not in params:
        return []
    try:
        listed = json.loads(params["overrides"])
    except json.JSONDecodeError:
        listed = None
    if not isinstance(listed, list):
        raise ConfigError(f"-p overrides={params['overrides']!r} is not a JSON list of 'a.b=c' strings.")
    return [str(o) for o in listed]


def _refuse_placement(args: argparse.Namespace, params: dict[str, str]) -> None:
    """A submitted run starts templates compiled earlier: --set and -p overrides cannot move its training."""
    refuse_run_time_placement([o.split(":", 1)[-1] for o in args.overrides], "--set")
    refuse_run_time_placement(listed_overrides(params), "-p overrides")


def _submit(args: argparse.Namespace, api: Any) -> int:
    plain = [o for o in args.overrides if ":" not in o.split("=", 1)[0]]
    task = args.tasks[0] if len(args.tasks) == 1 else None
    given = parse_params(args.params)
    _refuse_placement(args, given)
    # The run's own configuration sizes the GPU check: -p overrides, then --set, as the steps will load it.
    cfg = load_config(args.config, args.env, [*listed_overrides(given), *plain], task=task)
    params, jobs = task_parameters(args, given)
    namespace = args.namespace or cfg.cluster.namespace
    kueue = kueue_run(cfg, params, jobs) if cfg.training.backend == "trainjob" else None
    result, placement = submit(
        args.template, params, namespace, args.dry_run, api, gpus=requested_gpus(cfg) * jobs, kueue=kueue
    )
    if args.dry_run:
        print(yaml.safe_dump(result, sort_keys=False), end="")
    else:
        name = (result.get("metadata") or {}).get("name") or result["metadata"].get("generateName", "")
        print(f"submitted workflow {name} in namespace {namespace}")
        if placement is not None:
            print(f"training: {placement.message}")
    return 0


def kueue_run(cfg: PipelineConfig, params: dict[str, str], jobs: int) -> KueueRun:
    """The run as Kueue sees it: the TrainJob's GPUs, its allowed regions and its priority class's value."""
    from pipelines import k8s

    priority = params.get("priority") or cfg.training.placement.priority
    if priority not in cfg.cluster.priority_classes:
        raise ConfigError(
            f"-p priority={priority!r} is not one of cluster.priority_classes "
            f"({', '.join(cfg.cluster.priority_classes)})."
        )
    regions = [r.name for r in k8s.training_regions(cfg)]
    return KueueRun(requested_gpus(cfg), jobs, regions, cfg.cluster.priority_classes[priority])


if __name__ == "__main__":
    sys.exit(main())
