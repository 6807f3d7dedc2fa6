"""Our keys in the upstream controllers' own objects (argo/controller-settings/): what writes them, and that each side
keeps its keys however the other writes next. The write paths are modelled in tests/kubectl_apply_model.py after
kubectl (pkg/cmd/apply/patcher.go, pkg/cmd/apply/apply.go migrateToSSAIfNecessary), apimachinery
(pkg/util/strategicpatch/patch.go CreateThreeWayMergePatch) and structured-merge-diff (merge/update.go Apply)."""

from __future__ import annotations

import copy
import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.compile import default_compile_config, render_all
from pipelines.platform import controller_settings, events_controller, kyverno
from tests.kubectl_apply_model import (
    ARGO_CONTROLLER_CONFIGMAP,
    KNATIVE_FEATURES,
    LAST_APPLIED,
    Live,
    argo_events_configmap,
    client_side_apply,
    kubectl_server_side_apply,
    strategic_patch,
    upstream_of,
)

ROOT = Path(__file__).resolve().parents[1]
ARGO = ROOT / "argo"
# As a release writes them (overlays/prod/controller-settings/): every controller image by a digest.
RELEASE_PINS = {
    repository: "sha256:" + "c" * 64
    for repository in (
        "quay.io/argoproj/argoexec",
        "quay.io/argoproj/argo-events",
        "nats",
        "natsio/prometheus-nats-exporter",
        "natsio/nats-server-config-reloader",
    )
}
SETTINGS = controller_settings.render(default_compile_config(), RELEASE_PINS)
UPSTREAM_OWNED = {
    ("ConfigMap", "workflow-controller-configmap"),
    ("ConfigMap", "config-features"),
    ("ConfigMap", "config-network"),
    ("ConfigMap", events_controller.CONTROLLER_CONFIGMAP),
    ("Deployment", events_controller.DEPLOYMENT),
}


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def test_kubectl_apply_k_argo_writes_no_upstream_object() -> None:
    """Fails on the tree that listed argo-controller.yaml and knative.yaml in argo/kustomization.yaml: a client-side
    apply of those deletes the keys and labels of whoever applied them last."""
    kustomization = yaml.safe_load((ARGO / "kustomization.yaml").read_text())
    applied = [
        doc for name in kustomization["resources"] for doc in yaml.safe_load_all((ARGO / name).read_text()) if doc
    ]
    assert not {_key(d) for d in applied} & UPSTREAM_OWNED
    settings = {_key(d) for docs in SETTINGS.values() for d in docs}
    assert settings <= UPSTREAM_OWNED and len(settings) == len(SETTINGS)  # one object per file: `kubectl patch -f`


def _upstream_install(doc: dict[str, Any]) -> tuple[dict[str, Any], Live]:
    if doc["metadata"]["name"] == events_controller.CONTROLLER_CONFIGMAP:
        base = argo_events_configmap([{"version": "2.10.29", "natsImage": "nats:2.10.29"}])
    else:
        base = upstream_of(doc)
    assert base is not None, f"no upstream object modelled for {_key(doc)}"
    return base, client_side_apply(None, base)


def _ours(doc: dict[str, Any]) -> dict[str, Any]:
    """Our leaves of the document (what the patch sets)."""
    return {k: v for k, v in (doc.get("data") or {}).items()} or doc["spec"]["template"]["spec"]["containers"][0]


def _has(live: dict[str, Any], doc: dict[str, Any]) -> bool:
    if doc["kind"] == "ConfigMap":
        return all((live.get("data") or {}).get(k) == v for k, v in doc["data"].items())
    (container,) = live["spec"]["template"]["spec"]["containers"]
    want = doc["spec"]["template"]["spec"]["containers"][0]["env"]
    return all(e in container["env"] for e in want)


def _keeps_upstream(live: dict[str, Any], upstream: dict[str, Any]) -> bool:
    labels = upstream["metadata"].get("labels") or {}
    annotations = upstream["metadata"].get("annotations") or {}
    meta = live["metadata"]
    if any((meta.get("labels") or {}).get(k) != v for k, v in labels.items()):
        return False
    if any((meta.get("annotations") or {}).get(k) != v for k, v in annotations.items()):
        return False
    if upstream["kind"] == "Deployment":
        container = live["spec"]["template"]["spec"]["containers"][0]
        names = {e["name"] for e in container["env"]}
        return "NAMESPACE" in names and container["args"] == ["controller"] and live["spec"]["selector"]
    return all(k in (live.get("data") or {}) for k in upstream.get("data") or {} if k != "controller-config.yaml")


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_patch_keeps_both_sides_keys(name: str) -> None:
    """README's loop (`kubectl patch -f F --type strategic --patch-file F`): upstream's keys, labels and its
    last-applied annotation survive our patch, and our keys survive upstream's next client-side apply unless its own
    manifest names the same key (Argo Events' whole controller-config.yaml and ARGO_EVENTS_IMAGE), which preflight then
    reports (tests/test_preflight.py)."""
    (doc,) = SETTINGS[name]
    upstream, live = _upstream_install(doc)
    annotation = live.obj["metadata"]["annotations"][LAST_APPLIED]
    patched = strategic_patch(live, doc)
    assert _has(patched.obj, doc) and _keeps_upstream(patched.obj, upstream)
    assert patched.obj["metadata"]["annotations"][LAST_APPLIED] == annotation
    # An upstream upgrade: its manifest gains a key and is applied client-side as upstream's docs say.
    upgraded = copy.deepcopy(upstream)
    if upgraded["kind"] == "ConfigMap" and name != "argo-events-config.yaml":
        upgraded.setdefault("data", {})["_new-upstream-key"] = "x"
    after = client_side_apply(patched, upgraded)
    assert _keeps_upstream(after.obj, upgraded)
    collides = name in ("argo-events-config.yaml", "argo-events-image.yaml")
    assert _has(after.obj, doc) is not collides


def test_the_client_side_apply_we_left_deleted_upstreams_labels_and_lost_our_keys() -> None:
    """What `kubectl apply -k argo/` with knative.yaml in it did: Knative's labels go (the three-way merge's original is
    Knative's last-applied configuration), then Knative's next apply deletes our flags (its original is now ours)."""
    live = client_side_apply(None, KNATIVE_FEATURES)
    (ours,) = SETTINGS["knative.yaml"]
    ours_applied = client_side_apply(live, ours)
    assert "app.kubernetes.io/name" not in ours_applied.obj["metadata"]["labels"]
    assert "_example" not in ours_applied.obj["data"]
    back = client_side_apply(ours_applied, KNATIVE_FEATURES)
    assert not set(ours["data"]) & set(back.obj["data"])


def test_kubectl_server_side_apply_would_prune_upstreams_keys() -> None:
    """Why not `kubectl apply --server-side`: on an object a client-side apply created, kubectl hands that manager's
    fields to ours after the apply and applies again (apply.go migrateToSSAIfNecessary), which prunes every upstream
    key and label our document lacks."""
    live = client_side_apply(None, KNATIVE_FEATURES)
    (ours,) = SETTINGS["knative.yaml"]
    after = kubectl_server_side_apply(live, ours, "paddle-mlops")
    assert "app.kubernetes.io/name" not in after.obj["metadata"].get("labels", {})
    assert "_example" not in after.obj["data"]
    # Argo's own install is server-side (`kubectl apply --server-side`, README): no last-applied, nothing migrated.
    argo = kubectl_server_side_apply(
        Live(copy.deepcopy(ARGO_CONTROLLER_CONFIGMAP)), SETTINGS["argo-workflows.yaml"][0], "x"
    )
    assert set(argo.obj["data"]) == {"executor", "metricsConfig"}


def test_readme_install_patches_the_settings_and_applies_the_rest() -> None:
    readme = (ROOT / "README.md").read_text()
    for directory in ("argo/controller-settings", "overlays/prod/controller-settings"):
        assert controller_settings.apply_command(directory) in readme
    assert (
        "apply -f argo/controller-settings" not in readme and "--server-side -f argo/controller-settings" not in readme
    )


# --- everything by digest -------------------------------------------------------------------------------------


def _kyverno_denies(rule: dict[str, Any], image: str) -> bool:
    """A require-digest style foreach rule on one container image (Kyverno's wildcard match, pkg/utils/wildcard)."""
    (each,) = rule["validate"]["foreach"]
    for condition in (each.get("preconditions") or {}).get("all", []):
        if not fnmatch.fnmatchcase(image, condition["value"]):
            return False
    (deny,) = each["deny"]["conditions"]["any"]
    assert deny["operator"] == "NotEquals"
    return not fnmatch.fnmatchcase(image, deny["value"])


def test_the_digest_rule_covers_every_namespace_and_image_we_run() -> None:
    """Fails on the policy that matched only registry.example.com/paddle-mlops/* in the workload namespaces: argoexec,
    Argo Events, NATS and BuildKit by tag passed it."""
    files = render_all(default_compile_config())
    (policy,) = [d for ds in files.values() for d in ds if d["kind"] == "ClusterPolicy"]
    rule = next(r for r in policy["spec"]["rules"] if r["name"] == "require-digest")
    namespaces = {d["metadata"]["name"] for ds in files.values() for d in ds if d["kind"] == "Namespace"}
    (match,) = rule["match"]["any"]
    assert namespaces <= set(match["resources"]["namespaces"])
    for image in ("quay.io/argoproj/argoexec:v4.1.2", "nats:2.10.29", "moby/buildkit:v0.32.2-rootless"):
        assert _kyverno_denies(rule, image), image
    assert not _kyverno_denies(rule, "quay.io/argoproj/argoexec@sha256:" + "a" * 64)
    assert kyverno.owned_namespaces  # the function the policy is built from


def test_the_settings_name_every_controller_image_and_the_overlay_pins_them() -> None:
    cfg = default_compile_config()
    base = json.dumps(controller_settings.render(cfg))
    for image in ("quay.io/argoproj/argoexec:v4.1.2", "quay.io/argoproj/argo-events:v1.9.11", "nats:2.10.29"):
        assert image in base
    digest = "sha256:" + "b" * 64
    pins = {r: digest for r in ("quay.io/argoproj/argoexec", "quay.io/argoproj/argo-events", "nats")}
    pinned = json.dumps(controller_settings.render(cfg, pins))
    assert f"quay.io/argoproj/argoexec@{digest}" in pinned and f"nats@{digest}" in pinned
    assert "argoexec:v4.1.2" not in pinned and "argo-events:v1.9.11" not in pinned


def test_a_release_that_changes_only_nats_restarts_the_events_controller() -> None:
    """argo-events reloads its config in memory only and re-renders a bus only on the bus's own change
    (pkg/reconciler/config.go LoadConfig, cmd/start.go predicates): the config's digest in the controller's pod
    template makes the patch roll the controller, whose start reconciles every EventBus with the new images."""
    cfg = default_compile_config()
    image = lambda pins: controller_settings.render(cfg, pins)["argo-events-image.yaml"][0]  # noqa: E731
    digest = lambda doc: doc["spec"]["template"]["metadata"]["annotations"][events_controller.CONFIG_DIGEST]  # noqa: E731
    only_nats = {**RELEASE_PINS, "nats": "sha256:" + "d" * 64}
    assert digest(image(RELEASE_PINS)) != digest(image(only_nats))
    env = lambda doc: doc["spec"]["template"]["spec"]["containers"][0]["env"]  # noqa: E731
    assert env(image(RELEASE_PINS)) == env(image(only_nats))  # the image alone would not have restarted it
