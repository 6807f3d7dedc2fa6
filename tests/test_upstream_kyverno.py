"""Kyverno's verifyImages as the controller runs it: the key attestor must check signatures the way the
build step makes them (no transparency-log entry, no SCT), with fields the matrix minimum knows.

Encoded from kyverno/kyverno:
- v1.19.0 `pkg/engine/internal/imageverifier.go` lines 440-464 (same at v1.13.0 lines 624-648): for a
  `keys` attestor, no `rekor` means `RekorURL = https://rekor.sigstore.dev, IgnoreTlog = false`, and no
  `ctlog` means `IgnoreSCT = false`;
- v1.19.0 `pkg/image/verifiers/cpol/cosign/cosign.go` lines 147-166: unless IgnoreTlog, a Rekor client
  for that URL and its keys are loaded and the signature must be in that log; unless IgnoreSCT, the CT
  log keys are fetched from Sigstore's public TUF repository (`pkg/sigstoretuf/sigstoretuf.go`);
- v1.13.0 and v1.19.0 `config/crds/kyverno/kyverno.io_clusterpolicies.yaml`: the fields of
  `verifyImages[].attestors[].entries[].keys` and of its `rekor` and `ctlog`, and of
  `verifyImages[].imageRegistryCredentials`;
- registry credentials: `api/kyverno/v1/image_verification_types.go` ImageRegistryCredentials.Secrets ("must live in
  the Kyverno namespace" at v1.13.0; v1.19.0 also takes namespace/name); v1.13.0 `pkg/engine/factories/
  registryclientfactory.go` builds the registry client from them through `registryclient.WithKeychainPullSecrets`,
  whose `pkg/registryclient/utils.go` reads each name with a lister of the Kyverno namespace and skips one that is not
  found; v1.19.0 `registryclientfactory.go` `prefixSecretNamespaces` puts a bare name in the Kyverno namespace.
  Without credentials the registry client is anonymous, and a private registry refuses the signature pull.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops.compile import default_compile_config, render_all
from paddle_mlops_core import versions
from pipelines.platform import kyverno
from steps import build_image

PUBLIC_REKOR = "https://rekor.sigstore.dev"
# The CRD's fields at v1.13.0 (the matrix minimum) and v1.19.0 alike.
KEYS_FIELDS = {"publicKeys", "kms", "secret", "rekor", "ctlog", "signatureAlgorithm"}
REKOR_FIELDS = {"url", "pubkey", "ignoreTlog"}
CTLOG_FIELDS = {"ignoreSCT", "pubkey", "tsaCertChain"}


@dataclass(frozen=True)
class VerifierOptions:
    """What Kyverno's cosign verifier is built with for one `keys` attestor entry."""

    rekor_url: str
    ignore_tlog: bool
    ignore_sct: bool

    @property
    def needs_public_network(self) -> bool:
        """The public Rekor log, or the public TUF repository for the CT log keys (cosign.go 147-166)."""
        return (not self.ignore_tlog and self.rekor_url == PUBLIC_REKOR) or not self.ignore_sct


def keys_options(keys: dict[str, Any]) -> VerifierOptions:
    """imageverifier.go's defaulting for a `keys` attestor (lines 449-464 at v1.19.0)."""
    rekor, ctlog = keys.get("rekor"), keys.get("ctlog")
    if rekor is None:
        url, ignore_tlog = PUBLIC_REKOR, False
    else:
        url, ignore_tlog = rekor.get("url", ""), bool(rekor.get("ignoreTlog", False))
    ignore_sct = bool(ctlog.get("ignoreSCT", False)) if ctlog is not None else False
    return VerifierOptions(url, ignore_tlog, ignore_sct)


def key_entries(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        entry["keys"]
        for rule in policy["spec"]["rules"]
        for verify in rule.get("verifyImages", [])
        for attestor in verify["attestors"]
        for entry in attestor["entries"]
    ]


def signature_problems(policy: dict[str, Any], tlog_upload: bool) -> list[str]:
    """Why Kyverno would refuse images signed by a build step that does (not) upload to the log."""
    problems = []
    for keys in key_entries(policy):
        options = keys_options(keys)
        if not tlog_upload and not options.ignore_tlog:
            problems.append(f"signed without a log entry, but verified against the log at {options.rekor_url}")
        if not options.ignore_sct:
            problems.append(
                "a key signature has no SCT, yet the CT log keys are fetched from the public TUF repository"
            )
    return problems


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    cfg = default_compile_config()
    (doc,) = [d for d in kyverno.render(cfg) if d["kind"] == "ClusterPolicy"]
    return doc


@pytest.fixture()
def build_step_uploads_to_tlog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Read off the build step's real cosign command (a stand-in cosign on PATH)."""
    cosign = tmp_path / "cosign"
    cosign.write_text("#!/bin/sh\n")
    cosign.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("COSIGN_PRIVATE_KEY", "stand-in")
    command = build_image.sign_command("registry.example.com/paddle-mlops/train@sha256:" + "0" * 64)
    assert command is not None and "--key" in command
    return "--tlog-upload=false" not in command


def test_the_policy_verifies_signatures_the_way_the_build_step_makes_them(policy, build_step_uploads_to_tlog):
    assert key_entries(policy), "the policy has a key attestor"
    assert signature_problems(policy, build_step_uploads_to_tlog) == []


def test_verification_needs_no_public_sigstore_service(policy):
    """The build step skips Rekor because the cluster may be air-gapped; admission must not need it either."""
    for keys in key_entries(policy):
        assert not keys_options(keys).needs_public_network, keys


def test_the_check_catches_an_attestor_left_at_kyvernos_defaults(policy):
    """An attestor with only `publicKeys` (the old policy) is verified against the public Rekor log."""
    bare = {"spec": {"rules": [{"verifyImages": [{"attestors": [{"entries": [{"keys": {"publicKeys": "k"}}]}]}]}]}}
    assert keys_options({"publicKeys": "k"}) == VerifierOptions(PUBLIC_REKOR, False, False)
    assert len(signature_problems(bare, tlog_upload=False)) == 2
    assert signature_problems(policy, tlog_upload=False) == []


def test_attestor_fields_exist_in_the_crd_at_the_matrix_minimum(policy):
    assert versions.supports("kyverno", "verifyImages keys.rekor.ignoreTlog and keys.ctlog.ignoreSCT")
    for keys in key_entries(policy):
        assert set(keys) <= KEYS_FIELDS, keys
        assert set(keys.get("rekor", {})) <= REKOR_FIELDS, keys
        assert set(keys.get("ctlog", {})) <= CTLOG_FIELDS, keys


# v1.13.0 and v1.19.0 kyverno.io_clusterpolicies.yaml: verifyImages[].imageRegistryCredentials properties.
REGISTRY_CREDENTIALS_FIELDS = {"allowInsecureRegistry", "providers", "secrets"}


def registry_secrets(namespace_of_kyverno: str, credentials: dict[str, Any]) -> list[tuple[str, str]]:
    """(namespace, name) of each Secret the registry client is built from, as Kyverno 1.13 resolves them: bare
    names in its own namespace (a namespace/name would be looked up as a name there and never found)."""
    return [(namespace_of_kyverno, name) for name in credentials.get("secrets") or [] if "/" not in name]


def test_the_signature_check_carries_the_registry_credentials_the_install_references(policy):
    """A registry that needs a login answers 401 to an anonymous client; with failurePolicy Fail every project pod
    would then be denied. The rule pulls signatures with the install's registry Secret, in the Kyverno namespace."""
    cfg = default_compile_config()
    (verify,) = [v for rule in policy["spec"]["rules"] for v in rule.get("verifyImages", [])]
    credentials = verify["imageRegistryCredentials"]
    assert set(credentials) <= REGISTRY_CREDENTIALS_FIELDS
    assert registry_secrets(kyverno.KEY_NAMESPACE, credentials) == [(kyverno.KEY_NAMESPACE, cfg.images.registry_secret)]
    # The same Secret the build step pushes with (argo/train-deploy.yaml), so one set of credentials serves both.
    build = [d for d in render_all(cfg)["train-deploy.yaml"] if d["kind"] == "WorkflowTemplate"][0]
    (template,) = [t for t in build["spec"]["templates"] if t["name"] == "build-image"]
    assert cfg.images.registry_secret in {v.get("secret", {}).get("secretName") for v in template["volumes"]}


def test_preflight_checks_the_registry_secret_exists_in_the_kyverno_namespace():
    """utils.go skips a Secret it cannot find; preflight is where a missing one shows, with a fix of the type
    go-containerregistry pkg/authn/kubernetes/keychain.go reads (kubernetes.io/dockerconfigjson)."""
    from paddle_mlops.cluster_requirements import requirements
    from paddle_mlops.preflight.objects import check_secrets

    cfg = default_compile_config()
    req = requirements(cfg)
    assert (kyverno.KEY_NAMESPACE, cfg.images.registry_secret) in req.secrets

    class NoSecrets:
        def secret_exists(self, name: str, namespace: str) -> bool:
            return namespace != kyverno.KEY_NAMESPACE

    (missing,) = [r for r in check_secrets(NoSecrets(), req) if r.status == "finding"]  # type: ignore[arg-type]
    assert missing.subject == f"{kyverno.KEY_NAMESPACE}/{cfg.images.registry_secret}"
    assert "--type=kubernetes.io/dockerconfigjson --from-file=.dockerconfigjson=<file>" in missing.fix
