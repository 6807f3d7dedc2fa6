"""Configuration models and loader (shared by `pipelines/` and `steps/`)."""

from paddle_mlops.config.loader import ConfigError, load_config, load_regions, load_teams
from paddle_mlops.config.models import PipelineConfig, RegionConfig, TeamConfig

__all__ = ["ConfigError", "PipelineConfig", "RegionConfig", "TeamConfig", "load_config", "load_regions", "load_teams"]
