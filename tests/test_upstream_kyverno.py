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
  `verifyImages[].attestors[].entries[].keys` and of its `rekor` and `ctlog`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops import versions
from paddle_mlops.compile import default_compile_config
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
