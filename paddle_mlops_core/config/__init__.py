"""Configuration models and loader (shared by `pipelines/` and `steps/`)."""

from paddle_mlops_core.config.loader import ConfigError, load_config, load_regions, load_teams
from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from paddle_mlops_core.config.teams import TeamConfig

__all__ = ["ConfigError", "PipelineConfig", "RegionConfig", "TeamConfig", "load_config", "load_regions", "load_teams"]
