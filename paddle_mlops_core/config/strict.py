"""The base of every configuration model: unknown keys are errors and a loaded configuration never changes.

A typo in YAML is an error, not a silently ignored setting, and a configuration handed to a step or a template
builder is the one that was validated.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# A Kubernetes object name (RFC 1123 label): namespaces, priority classes, teams, regions, the served model.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A Secret's, ConfigMap's or Service's name (RFC 1123 subdomain): labels joined by dots.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
