"""A minimal schema of PrometheusRule.spec (prometheus-operator CRD), strict where we write; the
manifest validator (tests/validate_crds.py) checks every PrometheusRule against it."""

from __future__ import annotations

from typing import Any

PROMETHEUS_RULE_SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["groups"],
    "additionalProperties": False,
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "rules"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    "rules": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["alert", "expr"],
                            "additionalProperties": False,
                            "properties": {
                                "alert": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*$"},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h|d)$"},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        }
    },
}
