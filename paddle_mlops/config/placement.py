"""Where a run's training job may be admitted: the cross-file checks no single YAML file can make.

A team's `regions` (configs/teams/) list the GPU regions (configs/regions/) it holds quota in, in
preference order; the run may exclude some (`training.placement.exclude_regions`), and data that
may not move (`data.region` with `data.movable: false`) pins it to its own region. Both the
generated Kueue objects and the TrainJob's node affinity come from `allowed_regions`, so a
combination that could never be admitted is refused here, at configuration time, with the files
to change, instead of a job that waits in its queue forever.
"""

from __future__ import annotations

from paddle_mlops.config.loader import ConfigError
from paddle_mlops.config.models import PipelineConfig, RegionConfig, TeamConfig


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
