"""Kyverno admission policy: our images must be cosign-signed, and no pod may run an unpinned image.

The cosign public key lives in one ConfigMap (`kyverno/paddle-mlops-cosign`); the key shipped here
is a PLACEHOLDER that matches nothing, so signed images are refused until an operator replaces it
with the real `cosign.pub` (e.g. `kubectl -n kyverno create configmap paddle-mlops-cosign
--from-file=cosign.pub --dry-run=client -o yaml | kubectl apply -f -`).
"""

from __future__ import annotations

from typing import Any

from paddle_mlops.config import PipelineConfig, TeamConfig, load_teams
from pipelines.platform.meta import metadata

POLICY_NAME = "paddle-mlops-images"
KEY_CONFIGMAP = "paddle-mlops-cosign"
KEY_NAMESPACE = "kyverno"
KEY_FIELD = "cosign.pub"
PLACEHOLDER_KEY = (
    "-----BEGIN PUBLIC KEY-----\nREPLACE-ME-WITH-THE-COSIGN-PUBLIC-KEY-OF-THE-IMAGE-SIGNER\n-----END PUBLIC KEY-----\n"
)
ALL_CONTAINERS = "request.object.spec.[ephemeralContainers, initContainers, containers][]"


def workload_namespaces(cfg: PipelineConfig, teams: dict[str, TeamConfig]) -> list[str]:
    """Where training and serving pods run: the pipeline namespace and every team namespace."""
    return sorted({cfg.cluster.namespace, *(t.namespace for t in teams.values())})


def key_configmap() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            KEY_CONFIGMAP,
            KEY_NAMESPACE,
            annotations={
                "paddle-mlops/replace": f"{KEY_FIELD} is a placeholder: put the image signer's cosign public key here"
            },
        ),
        "data": {KEY_FIELD: PLACEHOLDER_KEY},
    }


def _match(namespaces: list[str]) -> dict[str, Any]:
    return {"any": [{"resources": {"kinds": ["Pod"], "namespaces": namespaces}}]}


def verify_rule(cfg: PipelineConfig, namespaces: list[str]) -> dict[str, Any]:
    """Signature check of every image from our registry; the tag is replaced by the verified digest."""
    return {
        "name": "verify-signature",
        "match": _match(namespaces),
        "context": [{"name": "cosign", "configMap": {"name": KEY_CONFIGMAP, "namespace": KEY_NAMESPACE}}],
        "verifyImages": [
            {
                "imageReferences": [f"{cfg.images.registry}/*"],
                "mutateDigest": True,
                "verifyDigest": True,
                "required": True,
                "attestors": [
                    {"count": 1, "entries": [{"keys": {"publicKeys": f'{{{{ cosign.data."{KEY_FIELD}" }}}}'}}]}
                ],
            }
        ],
    }


def latest_rule(namespaces: list[str]) -> dict[str, Any]:
    """`:latest` (or no tag, which means latest) moves under a running service: refuse it."""
    return {
        "name": "refuse-latest-or-untagged",
        "match": _match(namespaces),
        "validate": {
            "message": "Image {{ element.image }} is not pinned: use a version tag or an @sha256 digest, never ':latest'.",
            "foreach": [
                {
                    "list": ALL_CONTAINERS,
                    "deny": {
                        "conditions": {
                            "any": [
                                {"key": "{{ element.image }}", "operator": "Equals", "value": "*:latest"},
                                {
                                    "key": "{{ contains(element.image, ':') || contains(element.image, '@') }}",
                                    "operator": "Equals",
                                    "value": False,
                                },
                            ]
                        }
                    },
                }
            ],
        },
    }


def digest_rule(cfg: PipelineConfig, namespaces: list[str]) -> dict[str, Any]:
    """Our images must reach the kubelet by digest (verify-signature rewrites signed ones); an image
    from our registry that escaped verification is refused here."""
    return {
        "name": "require-digest",
        "match": _match(namespaces),
        "validate": {
            "message": "Image {{ element.image }} from {registry} must be pinned by @sha256 digest.".replace(
                "{registry}", cfg.images.registry
            ),
            "foreach": [
                {
                    "list": ALL_CONTAINERS,
                    "preconditions": {
                        "all": [
                            {"key": "{{ element.image }}", "operator": "Equals", "value": f"{cfg.images.registry}/*"}
                        ]
                    },
                    "deny": {
                        "conditions": {
                            "any": [{"key": "{{ element.image }}", "operator": "NotEquals", "value": "*@sha256:*"}]
                        }
                    },
                }
            ],
        },
    }


def cluster_policy(cfg: PipelineConfig, teams: dict[str, TeamConfig]) -> dict[str, Any]:
    namespaces = workload_namespaces(cfg, teams)
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": metadata(
            POLICY_NAME,
            annotations={
                "policies.kyverno.io/title": "Signed and pinned images",
                "policies.kyverno.io/description": (
                    "Images from the project registry must carry a valid cosign signature and run by digest; "
                    "no pod in the training and serving namespaces may use ':latest' or an untagged image."
                ),
            },
        ),
        "spec": {
            "validationFailureAction": "Enforce",
            # Admission only: existing pods are not re-judged in the background.
            "background": False,
            "webhookTimeoutSeconds": 30,
            "failurePolicy": "Fail",
            "rules": [verify_rule(cfg, namespaces), latest_rule(namespaces), digest_rule(cfg, namespaces)],
        },
    }


def render(cfg: PipelineConfig, teams: dict[str, TeamConfig] | None = None) -> list[dict[str, Any]]:
    teams = load_teams() if teams is None else teams
    return [key_configmap(), cluster_policy(cfg, teams)]
