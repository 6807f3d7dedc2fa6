"""Running preflight: every check in order, a refused read turned into a finding, the report as
aligned text or JSON, and the exit code (0 ready, 1 findings, 2 bad usage or an unreachable cluster)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

from kubernetes.client.exceptions import ApiException
from rich.console import Console
from rich.text import Text

from paddle_mlops.cluster_requirements import Requirements, requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.controller_settings import (
    check_event_bus,
    check_knative_features,
    check_knative_network,
    check_kueue_config,
)
from paddle_mlops.preflight.cosign_key import check_cosign_key
from paddle_mlops.preflight.objects import check_crds, check_secrets
from paddle_mlops.preflight.pods_ready import check_kueue_pods_ready
from paddle_mlops.preflight.raw_ingress import check_raw_ingress
from paddle_mlops.preflight.release import check_release_digests
from paddle_mlops.preflight.results import FINDING, OK, WARNING, PreflightUsageError, Result
from paddle_mlops.preflight.security import check_argo_executor, check_namespaces
from paddle_mlops.preflight.settings_applied import check_events_image
from paddle_mlops.preflight.versions import check_controllers, check_kubernetes
from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

CHECKS = (
    ("kubernetes", check_kubernetes),
    ("controller", check_controllers),
    ("crd", check_crds),
    ("namespace", check_namespaces),
    ("argo-executor", check_argo_executor),
    ("knative-features", check_knative_features),
    ("knative-network", check_knative_network),
    ("raw-ingress", check_raw_ingress),
    ("kueue-config", check_kueue_config),
    ("kueue-pods-ready", check_kueue_pods_ready),
    ("secret", check_secrets),
    ("cosign-key", check_cosign_key),
    ("eventbus", check_event_bus),
    ("events-image", check_events_image),
    ("release-digests", check_release_digests),
)
STYLES = {OK: "green", WARNING: "yellow", FINDING: "bold red"}


def run_checks(api: KubernetesApi, req: Requirements) -> list[Result]:
    """Every check's results; a refused read is a finding, an unreachable API server a usage error."""
    from urllib3.exceptions import HTTPError

    results: list[Result] = []
    for name, check in CHECKS:
        try:
            results.extend(check(api, req))
        except ApiException as exc:
            results.append(
                Result(
                    name,
                    "(api)",
                    FINDING,
                    f"the API server refused a read: {exc.status} {exc.reason}",
                    "run preflight with an account that may get/list CRDs, Deployments, Namespaces, ConfigMaps "
                    "and Secret metadata (for example a cluster-admin context)",
                )
            )
        except (HTTPError, OSError) as exc:
            raise PreflightUsageError(
                f"cannot reach the Kubernetes API server ({api.where or 'current context'}): {exc}. "
                "Check the context, the network/VPN and that the cluster is up."
            ) from None
    return results


def render(results: Sequence[Result], console: Console) -> None:
    width = max((len(f"{r.check} {r.subject}") for r in results), default=0)
    for r in results:
        line = Text(f"{r.status:<8}", style=STYLES[r.status])
        line.append(f" {f'{r.check} {r.subject}':<{width}}  {r.message}")
        console.print(line, highlight=False)
        if r.fix:
            console.print(Text(f"{'':<8}   fix: {r.fix}"), highlight=False)
    counts = {s: sum(r.status == s for r in results) for s in (OK, WARNING, FINDING)}
    verdict = "ready" if not counts[FINDING] else "not ready"
    console.print(
        Text(
            f"{counts[OK]} ok, {counts[WARNING]} warning(s), {counts[FINDING]} finding(s): {verdict}.",
            style=STYLES[FINDING if counts[FINDING] else OK],
        ),
        highlight=False,
    )


def preflight(
    cfg: PipelineConfig,
    console: Console,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    as_json: bool = False,
    api: KubernetesApi | None = None,
) -> int:
    """Check the cluster of `context` against the install set of `cfg`; the exit code."""
    try:
        api = api or KubernetesApi.connect(kubeconfig, context)
        results = run_checks(api, requirements(cfg))
    except PreflightUsageError as exc:
        console.file.flush()
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if as_json:
        console.out(json.dumps([asdict(r) for r in results], indent=2, ensure_ascii=False), highlight=False)
    else:
        render(results, console)
    return EXIT_FINDINGS if any(r.status == FINDING for r in results) else EXIT_OK
