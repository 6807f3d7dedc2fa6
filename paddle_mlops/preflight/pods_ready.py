"""Preflight's check of Kueue's waitForPodsReady: without it, a TrainJob admitted with pods that never all start
holds its team's GPU quota until its deadline; with a timeout shorter than an image pull plus the rendezvous,
Kueue evicts runs that were only starting. What Kueue does with the setting: pipelines/platform/kueue_config.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from paddle_mlops.cluster_requirements import Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controllers import CONTROLLERS, controller_namespace, runs
from paddle_mlops.preflight.results import FINDING, OK, WARNING, Result

CHECK = "kueue-pods-ready"


def _manager_args(deployments: list[Any]) -> list[str]:
    """The command line of Kueue's controller manager (its --feature-gates)."""
    for deployment in deployments:
        for container in deployment.spec.template.spec.containers or []:
            if runs(CONTROLLERS["kueue"], container):
                return [*(container.command or []), *(container.args or [])]
    return []


def _documented(kc: Any) -> str:
    return yaml.safe_dump({"waitForPodsReady": kc.WAIT_FOR_PODS_READY}, sort_keys=False).strip().replace("\n", "; ")


def check_kueue_pods_ready(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    from pipelines.platform import kueue_config as kc

    if not req.kueue_frameworks:
        return
    deployments = api.deployments()
    namespace = controller_namespace(deployments, "kueue") or kc.NAMESPACE
    subject = f"{namespace}/{kc.CONFIGMAP}"
    data = api.config_map_data(kc.CONFIGMAP, namespace)
    if data is None:
        return  # check_kueue_config reports the missing ConfigMap
    fix = (f"set {_documented(kc)} in key {kc.CONFIGMAP_KEY} (docs/training.md), remove any "
           f"{kc.DISABLE_PODS_READY_GATE} feature gate, then kubectl -n {namespace} rollout restart "
           f"deployment/{kc.DEPLOYMENT}")  # fmt: skip
    config = kc.parse(data)
    block = kc.pods_ready(config, _manager_args(deployments))
    if block is None:
        yield Result(CHECK, subject, FINDING, "waitForPodsReady is off: a TrainJob whose pods never all start (an "
                     "image that cannot be pulled, a rendezvous that never happens) holds its GPU quota until its "
                     "deadline", fix)  # fmt: skip
        return
    yield from _judge(kc, subject, block, fix, kc.deactivated_retention(config))


def _judge(kc: Any, subject: str, block: dict[str, Any], fix: str, retention: Any) -> Iterator[Result]:
    timeout = kc.seconds(block["timeout"])
    if timeout is None or timeout < kc.MIN_TIMEOUT_SECONDS:
        yield Result(CHECK, subject, FINDING, f"waitForPodsReady.timeout {block['timeout']} is shorter than an image "
                     f"pull and the rendezvous ({kc.MIN_TIMEOUT_SECONDS // 60}m): Kueue would evict runs that are "
                     "only starting", fix)  # fmt: skip
        return
    short = retention is not None and (kc.seconds(retention) or 0) < kc.DEACTIVATED_RETENTION_SECONDS
    if block["requeuingStrategy"].get("backoffLimitCount") is None:
        yield Result(CHECK, subject, WARNING, "waitForPodsReady.requeuingStrategy.backoffLimitCount is unset: a "
                     "TrainJob whose pods can never start is evicted and requeued forever, and its train step waits "
                     "out its whole deadline", fix)  # fmt: skip
    elif short:
        yield Result(CHECK, subject, WARNING, f"objectRetentionPolicies.workloads.afterDeactivatedByKueue {retention} "
                     "deletes a deactivated TrainJob before its train step may have read why: the step then reports "
                     "only that the job was deleted",
                     f"unset it, or make it at least {kc.DEACTIVATED_RETENTION_SECONDS // 60}m")  # fmt: skip
    elif kc.seconds(block["recoveryTimeout"]) == 0:
        yield Result(CHECK, subject, WARNING, "waitForPodsReady.recoveryTimeout is 0s: a gang broken mid-run keeps "
                     "its quota however long it takes to come back", fix)  # fmt: skip
    else:
        limit = block["requeuingStrategy"]["backoffLimitCount"]
        kept = f", afterDeactivatedByKueue {retention}" if retention is not None else ""
        yield Result(CHECK, subject, OK, f"waitForPodsReady: timeout {block['timeout']}, recoveryTimeout "
                     f"{block['recoveryTimeout']}, backoffLimitCount {limit}{kept}")  # fmt: skip
