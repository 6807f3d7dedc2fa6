"""Kyverno admission policy: our images must be cosign-signed, and no pod may run an unpinned image.

The cosign public key lives in one ConfigMap (`kyverno/paddle-mlops-cosign`), which the install set does not
contain: every `kubectl apply -k` of a placeholder would put it back over the real key and, the policy failing
closed, refuse every project pod. The operator creates it once from the signer's `cosign.pub` (`KEY_COMMAND`);
`paddle-mlops preflight` checks it is there and holds a public key (paddle_mlops/preflight/cosign_key.py).

Every image is signed with that key pair and without a transparency-log entry: the train image by
the build step (steps/build_image.py) per build, the images the pipeline never builds (`release_images`)
by scripts/sign-images.sh at release, with the same flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from paddle_mlops_core.config import ConfigError, PipelineConfig, TeamConfig, load_config, load_teams
from pipelines.platform import mlflow_server
from pipelines.platform.meta import metadata

POLICY_NAME = "paddle-mlops-images"
KEY_CONFIGMAP = "paddle-mlops-cosign"
KEY_NAMESPACE = "kyverno"
KEY_FIELD = "cosign.pub"
KEY_COMMAND = (
    f"kubectl -n {KEY_NAMESPACE} create configmap {KEY_CONFIGMAP} --from-file={KEY_FIELD}=cosign.pub "
    "--dry-run=client -o yaml | kubectl apply -f -"
)
ALL_CONTAINERS = "request.object.spec.[ephemeralContainers, initContainers, containers][]"


def release_images(cfg: PipelineConfig) -> list[str]:
    """Images from the project registry that pods run but no pipeline builds: signed at release.

    The train image is signed by the build step, per build and by digest; `images.train` itself is
    the training runtime's default (argo/training-runtime.yaml), which a TrainJob made by hand without
    an image runs, so it is signed at release too. BuildKit's image is upstream's and runs in the
    build namespace, which this policy does not match.
    """
    mlflow = f"{cfg.images.registry}/{mlflow_server.NAME}:{mlflow_server.IMAGE_TAG}"
    return [cfg.images.tools, cfg.images.serve, cfg.images.train, mlflow]


def workload_namespaces(cfg: PipelineConfig, teams: dict[str, TeamConfig]) -> list[str]:
    """Where training and serving pods run: the pipeline namespace and every team namespace."""
    return sorted({cfg.cluster.namespace, *(t.namespace for t in teams.values())})


def owned_namespaces(cfg: PipelineConfig, teams: dict[str, TeamConfig]) -> list[str]:
    """Every namespace the install set creates pods in: the workload namespaces and the build namespace (BuildKit)."""
    return sorted({*workload_namespaces(cfg, teams), cfg.cluster.build_namespace})


def _match(namespaces: list[str]) -> dict[str, Any]:
    return {"any": [{"resources": {"kinds": ["Pod"], "namespaces": namespaces}}]}


def signature_keys() -> dict[str, Any]:
    """The key attestor, checking signatures the way they are made: with our key, and no log entry."""
    return {
        "publicKeys": f'{{{{ cosign.data."{KEY_FIELD}" }}}}',
        # Signed with --tlog-upload=false (an air-gapped cluster has no Rekor): without `rekor`, Kyverno
        # looks every signature up in the public Rekor log and finds none.
        "rekor": {"ignoreTlog": True},
        # A key signature has no certificate and so no SCT; without this Kyverno still fetches the
        # public CT log keys from Sigstore's TUF repository, which an air-gapped cluster cannot reach.
        "ctlog": {"ignoreSCT": True},
    }


def registry_credentials(cfg: PipelineConfig) -> dict[str, Any]:
    """The registry credentials Kyverno pulls signatures with: without them, a registry that needs a login answers
    401 and, with failurePolicy Fail, every project pod is denied. The Secret is named bare: Kyverno 1.13 reads
    `secrets` from its own namespace only (api/kyverno/v1/image_verification_types.go), 1.19 still defaults a bare
    name to it (pkg/engine/factories/registryclientfactory.go prefixSecretNamespaces). A Secret it cannot find is
    skipped without a word (pkg/registryclient/utils.go): `paddle-mlops preflight` checks it exists."""
    return {"secrets": [cfg.images.registry_secret]}


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
                "imageRegistryCredentials": registry_credentials(cfg),
                "attestors": [{"count": 1, "entries": [{"keys": signature_keys()}]}],
            }
        ],
    }


def latest_rule(namespaces: list[str]) -> dict[str, Any]:
    """`:latest` (or no tag, which means latest) moves under a running service: refuse it."""
    return {
        "name": "refuse-latest-or-untagged",
        "match": _match(namespaces),
        "validate": {
            "message": (
                "Image {{ element.image }} is not pinned: use a version tag or an @sha256 digest, never ':latest'."
            ),
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
    """Every image reaches the kubelet by digest: ours because verify-signature rewrites a signed tag to its digest
    (mutateDigest), upstream's (argoexec, Argo Events, NATS, BuildKit) because the release overlay and its controller
    settings name them by digest (pipelines/platform/upstream_images.py). A tag that escaped both is refused."""
    del cfg
    return {
        "name": "require-digest",
        "match": _match(namespaces),
        "validate": {
            "message": (
                "Image {{ element.image }} must be pinned by @sha256 digest: install from the release overlay "
                "(overlays/<env>) and patch its controller-settings/ into the controllers' objects (README, "
                "Controller settings: kubectl patch --type strategic, never a server-side apply)."
            ),
            "foreach": [
                {
                    "list": ALL_CONTAINERS,
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
    namespaces, owned = workload_namespaces(cfg, teams), owned_namespaces(cfg, teams)
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": metadata(
            POLICY_NAME,
            annotations={
                "policies.kyverno.io/title": "Signed and pinned images",
                "policies.kyverno.io/description": (
                    "Images from the project registry must carry a valid cosign signature; every image of every pod "
                    "in the namespaces the install set owns runs by digest, never ':latest' or untagged."
                ),
            },
        ),
        "spec": {
            "validationFailureAction": "Enforce",
            # Admission only: existing pods are not re-judged in the background.
            "background": False,
            "webhookTimeoutSeconds": 30,
            "failurePolicy": "Fail",
            "rules": [verify_rule(cfg, namespaces), latest_rule(owned), digest_rule(cfg, owned)],
        },
    }


def render(cfg: PipelineConfig, teams: dict[str, TeamConfig] | None = None) -> list[dict[str, Any]]:
    teams = load_teams() if teams is None else teams
    return [cluster_policy(cfg, teams)]


def main(argv: Sequence[str] | None = None) -> int:
    """Print `release_images`, one per line, for scripts/sign-images.sh."""
    parser = argparse.ArgumentParser(description="The images to sign at release (scripts/sign-images.sh).")
    parser.add_argument("--config", default=None, help="pipeline config file (default configs/pipeline.yaml)")
    parser.add_argument("--env", default=None, help="environment overlay, e.g. prod")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.env)
    except ConfigError as exc:
        print(f"release images: {exc}", file=sys.stderr)
        return 2
    print("\n".join(release_images(cfg)))
    return 0
