"""Where a run's training job may be admitted: the cross-file checks no single YAML file can make.

A team's `regions` (configs/teams/) list the GPU regions (configs/regions/) it holds quota in, in
preference order; the run may exclude some (`training.placement.exclude_regions`), and data that
may not move (`data.region` with `data.movable: false`) pins it to its own region. Both the
generated Kueue objects and the TrainJob's node affinity come from `allowed_regions`, so a
combination that could never be admitted is refused here, at configuration time, with the files
to change, instead of a job that waits in its queue forever.
"""

from __future__ import annotations

from collections.abc import Sequence

from paddle_mlops_core.config.loader import ConfigError
from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from paddle_mlops_core.config.teams import TeamConfig

# Keys that decide where a run's training may be admitted. They are written into the TrainJob's node affinity and
# the Kueue objects when the templates are compiled, so a run's `overrides` parameter (which only the steps read)
# cannot change them: a run-time override would reach train.py and nothing else.
COMPILE_TIME_KEYS = ("data.region", "data.movable", "training.placement.")


def _placement_key(item: str) -> str | None:
    key = item.split("=", 1)[0].strip()
    return key if any(key == k or key.startswith(k) for k in COMPILE_TIME_KEYS) else None


def run_time_overrides(overrides: Sequence[str]) -> list[str]:
    """`overrides` without the placement keys (those a compiled template already holds)."""
    return [o for o in overrides if _placement_key(o) is None]


def refuse_run_time_placement(overrides: Sequence[str], where: str) -> None:
    """Raise ConfigError naming the compile-time way when run-time `overrides` set a placement key."""
    for item in overrides:
        key = _placement_key(item)
        if key is None:
            continue
        priority = (
            " (the priority of one run is its workflow parameter: -p priority=NAME)"
            if key.endswith(".priority")
            else ""
        )
        raise ConfigError(
            f"{where}: {item!r} sets {key}, which decides where training may be admitted: it is compiled into the "
            "TrainJob's node affinity and the Kueue objects, so a run's overrides cannot change it" + priority + ". "
            f"Set it at compile time instead: in configs/pipeline.yaml or an overlay of configs/env/, or "
            f"`paddle-mlops compile --set {item}`; then apply argo/ (kubectl apply -k argo/) and submit again."
        )


def team_regions(team: TeamConfig, regions: dict[str, RegionConfig]) -> list[RegionConfig]:
    """The team's regions in its preference order; an unknown region is a configuration error."""
    out = []
    for i, quota in enumerate(team.regions):
        if quota.region not in regions:
            known = ", ".join(sorted(regions)) or "none"
            raise ConfigError(
                f"configs/teams/{team.name}.yaml: regions[{i}].region {quota.region!r} has no "
                f"configs/regions/{quota.region}.yaml (known regions: {known}). Add the region file or fix the name."
            )
        out.append(regions[quota.region])
    return out


def allowed_regions(cfg: PipelineConfig, team: TeamConfig, regions: dict[str, RegionConfig]) -> list[RegionConfig]:
    """The regions this run's training may be admitted in, in the team's preference order."""
    held = team_regions(team, regions)
    if not held:
        raise ConfigError(
            f"configs/teams/{team.name}.yaml: team {team.name!r} (cluster.team) lists no GPU `regions`, so its "
            "Kueue ClusterQueue has no quota and no TrainJob of it can be admitted. List at least one region "
            "with its gpu/cpu/memory quota, or use a legacy backend (training.backend: kubeflow-paddlejob)."
        )
    for i, name in enumerate(cfg.training.placement.exclude_regions):
        if name not in regions:
            raise ConfigError(
                f"training.placement.exclude_regions[{i}]: {name!r} is not a region (configs/regions/: "
                f"{', '.join(sorted(regions))})."
            )
    allowed = [r for r in held if r.name not in cfg.training.placement.exclude_regions]
    data_region = cfg.data.region
    if data_region is not None and data_region not in regions:
        raise ConfigError(
            f"data.region {data_region!r} is not a region (configs/regions/: {', '.join(sorted(regions))}). "
            "Name the region whose object store holds the data, or leave data.region unset."
        )
    if data_region is not None and not cfg.data.movable:
        allowed = [r for r in allowed if r.name == data_region]
        if not allowed:
            why = (
                "excluded by training.placement.exclude_regions"
                if data_region in cfg.training.placement.exclude_regions
                else f"not among the GPU regions of team {team.name!r} (configs/teams/{team.name}.yaml regions: "
                f"{', '.join(r.name for r in held)})"
            )
            raise ConfigError(
                f"data.region {data_region!r} with data.movable: false pins training to {data_region}, but that "
                f"region is {why}, so no job could ever be admitted. Give the team quota in {data_region}, "
                "set data.movable: true if the data may be read from another region, or move the data."
            )
    if not allowed:
        raise ConfigError(
            f"training.placement.exclude_regions excludes every region of team {team.name!r} "
            f"({', '.join(r.name for r in held)}); leave at least one."
        )
    if cfg.training.placement.priority not in cfg.cluster.priority_classes:
        raise ConfigError(
            f"training.placement.priority {cfg.training.placement.priority!r} is not one of "
            f"cluster.priority_classes ({', '.join(cfg.cluster.priority_classes)})."
        )
    return allowed
