"""RawDeployment: the rollout counts a service as updated when its Deployment says so, not its Ready condition.

kserve v0.15.0 and v0.20.0 pkg/apis/serving/v1beta1/inference_service_status.go `PropagateRawStatus` derive Ready
and status.observedGeneration from the predictor Deployment (tests/raw_deployment_standin.py encodes them and the
Deployment controller): during a rolling update the old pod keeps `Available` True, so Ready stays True and
observedGeneration moves to the new generation before any new pod serves. Waiting for Ready with a fresh
observedGeneration (what the rollout did before issue #39) promotes and deletes the canary while the old model still
answers every request; the rollout now waits for kubectl's rollout-complete state (staging/src/k8s.io/kubectl/pkg/
polymorphichelpers/rollout_status.go) through `apps/deployments get` (argo/rbac.yaml).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from paddle_mlops_core.config.loader import load_config, load_regions
from steps.runtime.release import inference_service as isvc
from steps.runtime.release import raw_deployment
from steps.runtime.release.rollout_outcome import PROMOTED, ROLLED_BACK
from tests.kserve_standin import KServeStandIn
from tests.raw_deployment_standin import KSERVE_VERSIONS
from tests.rollout_doubles import IMAGE, MODEL_URI, FakeProbe
from tests.rollout_doubles import run_machine as run

OLD_URI = "s3://paddle-mlops/models/ernie-sentiment/7"


@pytest.fixture
def raw() -> tuple[Any, Any]:
    cfg = load_config(
        env="prod", overrides=["serving.deployment_mode=RawDeployment", "serving.ready_timeout_seconds=60"]
    )
    return cfg, load_regions()[cfg.serving.regions[0]]


def serving_old(cfg: Any, region: Any, **kw: Any) -> KServeStandIn:
    existing = {isvc.service_name(cfg, region): isvc.build_inference_service(cfg, region, OLD_URI, IMAGE, "7")}
    return KServeStandIn(existing=existing, **kw)


def serving_at(api: KServeStandIn, name: str, tick: int) -> str:
    """The model the service's available pod ran at `tick` (the last controller pass before it)."""
    (traffic,) = [t for at, n, t in api.history if n == name and at < tick][-1:]
    (revision,) = traffic
    svc = api.services[name]
    return next(r.template for r in svc.revisions if r.name == revision)


@pytest.mark.parametrize("kserve", KSERVE_VERSIONS)
def test_ready_stays_true_while_the_old_pod_serves_a_rolling_update(raw: tuple[Any, Any], kserve: str) -> None:
    """What PropagateRawStatus reports mid-rollout: Ready True, observedGeneration already the new generation."""
    cfg, region = raw
    name = isvc.service_name(cfg, region)
    api = serving_old(cfg, region, ready_after=8, kserve_version=kserve)
    before = api.get_namespaced_custom_object(isvc.GROUP, isvc.VERSION, "ns", isvc.PLURAL, name)
    body = isvc.build_inference_service(cfg, region, MODEL_URI, IMAGE, "8")
    body["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"]
    api.replace_namespaced_custom_object(isvc.GROUP, isvc.VERSION, "ns", isvc.PLURAL, name, body)
    for _ in range(3):
        seen = api.get_namespaced_custom_object(isvc.GROUP, isvc.VERSION, "ns", isvc.PLURAL, name)
    assert seen["status"]["observedGeneration"] > before["status"]["observedGeneration"]
    assert {c["type"]: c["status"] for c in seen["status"]["conditions"]}["Ready"] == "True"
    deployment = api.read_namespaced_deployment(f"{name}-predictor", "ns")
    assert raw_deployment.carries(deployment, body) and not raw_deployment.rolled_out(deployment)
    assert OLD_URI in serving_at(api, name, api.tick)


@pytest.mark.parametrize("kserve", KSERVE_VERSIONS)
def test_promoted_only_once_every_replica_serves_the_new_model(raw: tuple[Any, Any], kserve: str) -> None:
    """Fails on the pre-#39 rollout: it deleted the canary and said `promoted` while the old pod still served."""
    cfg, region = raw
    name, canary = isvc.service_name(cfg, region), isvc.canary_name(cfg, region)
    api = serving_old(cfg, region, ready_after=8, kserve_version=kserve)
    probe = FakeProbe()
    assert run(cfg, [region], api, probe).outcome == PROMOTED
    assert MODEL_URI in serving_at(api, name, api.deleted_at[canary]), "the canary went before the new model served"
    assert probe.smoked[-1] == f"http://{name}.ns.example.com"


@pytest.mark.parametrize("kserve", KSERVE_VERSIONS)
def test_new_pods_that_never_become_available_roll_back(raw: tuple[Any, Any], kserve: str) -> None:
    """The canary was healthy, the main Deployment's new pods never are (an image pull, a node pool): pre-#39 this was
    promoted on the old pod's Ready; now it is rolled back, the old spec restored and the canary deleted."""
    cfg, region = raw
    name, canary = isvc.service_name(cfg, region), isvc.canary_name(cfg, region)
    broken = lambda n, body: not (n == name and MODEL_URI in json.dumps(body))  # noqa: E731
    api = serving_old(cfg, region, ready=broken, kserve_version=kserve, progress_deadline=6)
    outcome = run(cfg, [region], api, FakeProbe())
    assert outcome.outcome == ROLLED_BACK
    assert "ProgressDeadlineExceeded" in outcome.reason or "timed out progressing" in outcome.reason, outcome.reason
    assert api.model_uri(name) == OLD_URI and canary not in api.objects


def test_without_a_progress_deadline_the_wait_ends_at_the_ready_timeout(raw: tuple[Any, Any]) -> None:
    cfg, region = raw
    name = isvc.service_name(cfg, region)
    broken = lambda n, body: not (n == name and MODEL_URI in json.dumps(body))  # noqa: E731
    outcome = run(cfg, [region], serving_old(cfg, region, ready=broken), FakeProbe())
    assert outcome.outcome == ROLLED_BACK and "did not roll the new spec out to every replica within 60s" in (
        outcome.reason
    )


def test_a_rerun_of_a_half_rolled_out_version_waits_for_it(raw: tuple[Any, Any]) -> None:
    """The same version applied but still rolling (a retried step) is not 'already serving'."""
    cfg, region = raw
    name = isvc.service_name(cfg, region)
    api = serving_old(cfg, region, ready_after=8)
    body = isvc.build_inference_service(cfg, region, MODEL_URI, IMAGE, "8")
    body["metadata"]["resourceVersion"] = api.objects[name]["metadata"]["resourceVersion"]
    api.replace_namespaced_custom_object(isvc.GROUP, isvc.VERSION, "ns", isvc.PLURAL, name, body)
    api.settle(2)
    assert not raw_deployment.serves(api, "ns", body)
    probe = FakeProbe()
    assert run(cfg, [region], api, probe).outcome == PROMOTED
    assert raw_deployment.serves(api, "ns", body) and probe.smoked, "it checked the model before calling it served"
