"""The platform install set beside the pipelines: the Argo and Knative controller settings, events, tenancy, RBAC,
network and admission policies, the MLflow server, the shared BuildKit daemon. Plain dicts, one
module per concept; `paddle-mlops compile` writes them to argo/.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig, TeamConfig, load_regions, load_teams
from pipelines.platform import (
    buildkit,
    controller_settings,
    events,
    kueue,
    kyverno,
    log_archive,
    mlflow_server,
    multikueue,
    network,
    publish_events,
    rbac,
    tenancy,
)


def render_platform(cfg: PipelineConfig, teams: dict[str, TeamConfig] | None = None) -> dict[str, list[dict[str, Any]]]:
    """File name under argo/ → the documents it holds (teams default to `configs/teams/*.yaml`)."""
    teams = load_teams() if teams is None else teams
    files = {
        # Patched into the upstream objects, not applied by `kubectl apply -k argo/` (controller_settings.py says why).
        **controller_settings.render_files(cfg),
        # each namespace our workflows run in, and where Argo archives their steps' logs
        "tenancy.yaml": [*tenancy.render(cfg, teams), *log_archive.render(cfg, teams)],
        "rbac.yaml": rbac.render(cfg),
        "network-policies.yaml": network.render(cfg),
        "policies.yaml": kyverno.render(cfg, teams),
        "events.yaml": [*events.render(cfg), *publish_events.render(cfg)],
        "mlflow.yaml": mlflow_server.render(cfg),
        "buildkit.yaml": buildkit.render(cfg),
        "kueue.yaml": kueue.render(cfg, teams),
    }
    if cfg.cluster.multikueue:  # argo/ is the manager's; each region's worker cluster applies workers/<region>.yaml
        files.update(multikueue.workers(cfg, teams, load_regions()))
    return files


__all__ = ["render_platform"]
