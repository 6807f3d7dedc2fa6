"""The rollout against what KServe v0.20.0 (and Knative Serving v1.21) really do with an InferenceService.

The stand-in API (tests/kserve_standin.py) encodes kserve v0.20.0
pkg/controller/v1beta1/inferenceservice/reconcilers/knative/ksvc_reconciler.go (canaryTrafficPercent
→ Knative traffic targets) and pkg/apis/serving/v1beta1/inference_service_status.go (PropagateStatus:
latest/previousRolledoutRevision, status.observedGeneration copied from the Knative Service).
"""

from __future__ import annotations

import json
from typing import Any

from paddle_mlops_core.config.loader import load_config, load_regions
from paddle_mlops_core.contracts import PART_OF_KEY, PART_OF_VALUE
from steps.runtime.release import inference_service as isvc
from steps.runtime.release.rollout_outcome import PROMOTED, ROLLED_BACK
from tests import rollout_doubles
from tests.kserve_standin import KServeStandIn
from tests.rollout_doubles import IMAGE, MODEL_URI, FakeProbe, previous_services
from tests.rollout_doubles import run_machine as run

OLD_URI = "s3://paddle-mlops/models/ernie-sentiment/7"
cfg, regions = rollout_doubles.cfg, rollout_doubles.regions  # the shared fixtures


def live_traffic(api: KServeStandIn, name: str, since: int = 0) -> list[dict[str, int]]:
    return [t for tick, n, t in api.history if n == name and tick >= since]


def first_write_after(api: KServeStandIn, name: str, tick: int) -> int:
    return min(t for t, n, _ in api.writes if n == name and t > tick)


def test_failed_canary_never_gets_traffic_after_the_verdict(cfg: Any, regions: list[Any]) -> None:
    """ksvc_reconciler.go: without canaryTrafficPercent the latest *ready* revision gets 100%.

    Re-applying the old spec creates a new revision that is not ready yet, so the latest ready one
    is the failed canary: it got 100% until the restored revision was Ready. Pinning with
    canaryTrafficPercent: 0 first (KServe docs/samples/v1beta1/rollout/README.md) never does that.
    """
    name = isvc.service_name(cfg, regions[0])
    api = KServeStandIn(existing=previous_services(cfg, regions[:1]), ready_after=3)
    outcome = run(cfg, regions[:1], api, FakeProbe(unhealthy_urls=(name,)))
    api.settle()
    assert outcome.outcome == ROLLED_BACK and "error rate" in outcome.reason
    (failed,) = api.revision_of(name, MODEL_URI)
    canary_ticks = [
        t for t, n, traffic in api.history if n == name and traffic.get(failed) == cfg.serving.canary_percent
    ]
    assert canary_ticks, "the canary never got its share"
    verdict = first_write_after(api, name, canary_ticks[-1])
    after = live_traffic(api, name, since=verdict)
    assert after and all(t.get(failed, 0) == 0 for t in after), after
    # The previous model serves again from a restored revision with the old spec, at 100%.
    assert api.model_uri(name) == OLD_URI
    assert after[-1] == {api.revision_of(name, OLD_URI)[-1]: 100}
    assert "canaryTrafficPercent" not in api.objects[name]["spec"]["predictor"]


def test_rollback_of_a_promoted_region_pins_to_its_previous_revision(cfg: Any, regions: list[Any]) -> None:
    """PropagateStatus moves latestRolledoutRevision back when a rolled-out revision is pinned to 0%."""
    first, second = (isvc.service_name(cfg, r) for r in regions)
    api = KServeStandIn(existing=previous_services(cfg, regions))
    outcome = run(cfg, regions, api, FakeProbe(unhealthy_urls=(second,)))
    api.settle()
    assert outcome.outcome == ROLLED_BACK and "region cn-east" in outcome.reason
    (promoted,) = api.revision_of(first, MODEL_URI)
    assert any(t == {promoted: 100} for t in live_traffic(api, first)), "cn-north was promoted first"
    pinned_at = min(
        t for t, n, body in api.writes if n == first and body["spec"]["predictor"].get("canaryTrafficPercent") == 0
    )
    back = [t for t in live_traffic(api, first, since=pinned_at) if t.get(promoted, 0) == 0]
    assert back, "traffic never left the new revision"
    # Once moved off the new model, traffic never returns to it.
    later = live_traffic(api, first, since=pinned_at)
    assert all(t.get(promoted, 0) == 0 for t in later[later.index(back[0]) :])
    for name in (first, second):
        assert api.model_uri(name) == OLD_URI


def test_restore_that_never_gets_ready_stays_pinned(cfg: Any, regions: list[Any]) -> None:
    name = isvc.service_name(cfg, regions[0])
    restores = {"n": 0}

    def ready(_: str, body: dict[str, Any]) -> bool:
        # The original revision is fine; any later revision of the old spec (the restore) is not.
        if OLD_URI in json.dumps(body):
            restores["n"] += 1
            return restores["n"] == 1
        return True

    api = KServeStandIn(ready=ready, existing=previous_services(cfg, regions[:1]))
    outcome = run(cfg, regions[:1], api, FakeProbe(unhealthy_urls=(name,)))
    assert outcome.outcome == ROLLED_BACK
    assert "traffic stays pinned to revision" in outcome.reason
    original = api.revision_of(name, OLD_URI)[0]
    assert {r: p for r, p in live_traffic(api, name)[-1].items() if p} == {original: 100}


def test_stale_status_right_after_an_update_is_not_taken_for_the_new_revision(cfg: Any, regions: list[Any]) -> None:
    """status.observedGeneration is the Knative Service's (PropagateStatus), and the status lags a write.

    The rollout waits for a *new* latestCreatedRevision that is also the latest ready one, so the
    old Ready=True is never read as the canary being up.
    """
    name = isvc.service_name(cfg, regions[0])
    api = KServeStandIn(ready=lambda n, body: OLD_URI in json.dumps(body), existing=previous_services(cfg, regions[:1]))
    probe = FakeProbe()
    outcome = run(cfg, regions[:1], api, probe)
    assert outcome.outcome == ROLLED_BACK and "not reached within 60s" in outcome.reason
    assert probe.smoked == [], "smoke-tested the old revision through a stale Ready"
    assert api.model_uri(name) == OLD_URI


def test_rerun_of_the_serving_version_changes_nothing(cfg: Any, regions: list[Any]) -> None:
    api = KServeStandIn(existing=previous_services(cfg, regions[:1]))
    assert run(cfg, regions[:1], api, FakeProbe()).outcome == PROMOTED
    calls = list(api.calls)
    assert run(cfg, regions[:1], api, FakeProbe()).outcome == PROMOTED
    assert api.calls == calls


def test_raw_deployment_checks_a_separate_canary_service() -> None:
    """Only ksvc_reconciler.go reads canaryTrafficPercent: Standard (raw) mode has no traffic split."""
    cfg = load_config(
        env="prod", overrides=["serving.deployment_mode=RawDeployment", "serving.ready_timeout_seconds=60"]
    )
    region = load_regions()[cfg.serving.regions[0]]
    existing = {isvc.service_name(cfg, region): isvc.build_inference_service(cfg, region, OLD_URI, IMAGE, "7")}
    api = KServeStandIn(existing=existing)
    probe = FakeProbe()
    assert run(cfg, [region], api, probe).outcome == PROMOTED
    canary = isvc.canary_name(cfg, region)
    # The canary first; the main service on its own URL once every replica runs the new model.
    main = isvc.service_name(cfg, region)
    assert probe.smoked == [f"http://{canary}.ns.example.com", f"http://{main}.ns.example.com"]
    assert ("delete", canary) in api.calls and canary not in api.objects
    assert "canaryTrafficPercent" not in api.objects[isvc.service_name(cfg, region)]["spec"]["predictor"]


# --------------------------------------------------------------------------- what the predictor pods get


def predictor_pod_labels(body: dict[str, Any]) -> dict[str, str]:
    """kserve v0.20.0 components/predictor.go buildObjectMeta: runtime < isvc < predictor labels, plus
    `serving.kserve.io/inferenceservice` and `component`; ksvc_reconciler.go copies them to the revision
    template (minus serviceLabelDisallowedList, by default only networking.knative.dev/visibility) and
    deployment_reconciler.go to the Deployment's pod template."""
    return {
        **body["metadata"]["labels"],
        **(body["spec"]["predictor"].get("labels") or {}),
        "serving.kserve.io/inferenceservice": body["metadata"]["name"],
        "component": "predictor",
    }


def test_predictor_pods_carry_the_labels_the_policies_select_on(cfg: Any, regions: list[Any]) -> None:
    body = isvc.build_inference_service(cfg, regions[0], MODEL_URI, IMAGE, "8")
    labels = predictor_pod_labels(body)
    assert labels[PART_OF_KEY] == PART_OF_VALUE
    assert labels["app.kubernetes.io/name"] == cfg.serving.model_name
    assert labels["paddle-mlops/model-version"] == "8" and labels["paddle-mlops/region"] == regions[0].name
    assert "networking.knative.dev/visibility" not in labels


def test_predictor_pod_spec_passes_knative_default_field_mask(cfg: Any, regions: list[Any]) -> None:
    """knative/serving v1.21 pkg/apis/serving/fieldmask.go PodSpecMask with pkg/apis/config/features.go
    defaults: a pod-level securityContext is rejected unless kubernetes.podspec-securitycontext is on;
    nodeSelector/tolerations need their flags (an install prerequisite, README "Cluster install")."""
    predictor = isvc.build_inference_service(cfg, regions[0], MODEL_URI, IMAGE, "8")["spec"]["predictor"]
    always_allowed = {"containers", "volumes", "automountServiceAccountToken", "serviceAccountName", "imagePullSecrets"}
    flagged = {"nodeSelector", "tolerations"}  # need kubernetes.podspec-nodeselector / -tolerations
    kserve_fields = {"minReplicas", "maxReplicas", "canaryTrafficPercent", "labels", "annotations"}
    assert set(predictor) <= always_allowed | flagged | kserve_fields, (
        set(predictor) - always_allowed - flagged - kserve_fields
    )
    assert predictor["automountServiceAccountToken"] is False  # only false is allowed
    ctx = predictor["containers"][0]["securityContext"]
    knative_container_fields = {
        "capabilities", "readOnlyRootFilesystem", "runAsUser", "runAsGroup", "runAsNonRoot",
        "allowPrivilegeEscalation", "seccompProfile", "privileged",
    }  # fmt: skip
    assert set(ctx) <= knative_container_fields
    assert ctx["runAsNonRoot"] is True and ctx["seccompProfile"] == {"type": "RuntimeDefault"}


def _first_attempt_died_after_the_canary(cfg: Any, region: Any) -> KServeStandIn:
    """What a retried rollout step finds: its first attempt applied the canary spec, then its pod was
    lost (exit -1, which the retry expression retries); KServe went on reconciling."""
    api = KServeStandIn(existing=previous_services(cfg, [region]))
    name = isvc.service_name(cfg, region)
    body = isvc.build_inference_service(cfg, region, MODEL_URI, IMAGE, "8", canary_percent=cfg.serving.canary_percent)
    body["metadata"]["resourceVersion"] = api.objects[name]["metadata"]["resourceVersion"]
    api.replace_namespaced_custom_object(isvc.GROUP, isvc.VERSION, cfg.cluster.namespace, isvc.PLURAL, name, body)
    api.settle()
    return api


def test_a_retried_rollout_finishes_the_canary_its_first_attempt_applied(cfg: Any, regions: list[Any]) -> None:
    """Re-applying the live spec creates no revision (Knative compares templates), so the retry must not
    wait for one: it checks the canary that is already up and promotes it."""
    name = isvc.service_name(cfg, regions[0])
    api = _first_attempt_died_after_the_canary(cfg, regions[0])
    (canary,) = api.revision_of(name, MODEL_URI)
    assert live_traffic(api, name)[-1][canary] == cfg.serving.canary_percent
    assert run(cfg, regions[:1], api, FakeProbe()).outcome == PROMOTED
    api.settle()
    assert api.revision_of(name, MODEL_URI) == [canary], "the retry made a revision of its own"
    assert live_traffic(api, name)[-1] == {canary: 100}


def test_a_retried_rollout_that_fails_pins_traffic_off_the_canary(cfg: Any, regions: list[Any]) -> None:
    """The retry saw the half-done canary as the 'previous' state; rolling back to it would leave the
    failed model its canary share, so the rollback pins the last rolled-out revision instead."""
    name = isvc.service_name(cfg, regions[0])
    api = _first_attempt_died_after_the_canary(cfg, regions[0])
    outcome = run(cfg, regions[:1], api, FakeProbe(unhealthy_urls=(name,)))
    api.settle()
    assert outcome.outcome == ROLLED_BACK
    (failed,) = api.revision_of(name, MODEL_URI)
    (original,) = api.revision_of(name, OLD_URI)
    assert {r: p for r, p in live_traffic(api, name)[-1].items() if p} == {original: 100}
    assert live_traffic(api, name)[-1].get(failed, 0) == 0
