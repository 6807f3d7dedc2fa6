"""The KServe serving target: a region-staged canary rollout of an InferenceService, with rollback.

Region by region: apply the new revision as a canary, wait for Ready, smoke-test it, watch its error
rate and p99 latency for `canary_window_seconds`, then promote it to 100%. A failure in any region
rolls back that region and every region already changed. RawDeployment's canary carries live traffic only
through a `serving.canary_router` (canary_route.py); without one it is smoke-checked and says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.config.regions import RegionConfig
from steps.runtime import runner
from steps.runtime.cluster.objects import in_cluster_api
from steps.runtime.release import inference_service as isvc
from steps.runtime.release import raw_deployment
from steps.runtime.release.canary_route import CanaryRouter, router_for, split_name
from steps.runtime.release.health import read_counts, watch_canary, watch_live
from steps.runtime.release.isvc_status import (
    canary_percent,
    canary_url,
    identity,
    is_ready,
    predictor_status,
    traffic_percent,
)
from steps.runtime.release.rollout_outcome import (
    CANARY_PASSED,
    PROMOTED,
    ROLLED_BACK,
    SMOKE_CHECKED,
    Outcome,
    RolloutFailed,
)

log = runner.log


class KServeRollout:
    """The region-staged canary state machine over a `CustomObjectsApi`-shaped client.

    Serverless: the new revision gets `canaryTrafficPercent`, then 100%. A rollback pins all traffic
    to the last rolled-out revision with `canaryTrafficPercent: 0` (KServe
    docs/samples/v1beta1/rollout/README.md, "Rollback and pin the model") before the previous spec
    is restored, so the failed revision never again gets live traffic. RawDeployment has no traffic
    split of KServe's (ksvc_reconciler.go is the only reader of canaryTrafficPercent): the new model runs
    as a separate `<name>-canary` InferenceService, smoke-tested, then given `canary_percent` of the live
    inference requests by a route of the rollout's own (`router`, steps/runtime/release/canary_route.py) for
    the window, or, without a router, checked with the smoke requests alone; a raw service counts as updated only once
    its Deployment has rolled the new spec out to every replica (`apps`, an AppsV1Api-shaped client;
    steps/runtime/release/raw_deployment.py says why Ready is not enough there); the main service is then
    smoke-tested on its own URL before the canary goes.
    """

    def __init__(
        self,
        cfg: PipelineConfig,
        api: Any,
        probe: Any,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_seconds: float = 5.0,
        apps: Any = None,
    ):
        self.cfg = cfg
        self.api = api
        self.apps = apps if apps is not None else api
        self.probe = probe
        self.clock = clock
        self.sleep = sleep
        self.poll = poll_seconds
        self.ns = cfg.cluster.namespace
        self.raw = cfg.serving.deployment_mode == "RawDeployment"
        self.router: CanaryRouter | None = router_for(cfg, api, clock, sleep, poll_seconds) if self.raw else None
        self._checked: list[str] = []  # per region rolled out: CANARY_PASSED | SMOKE_CHECKED

    # -- Kubernetes access
    def _get(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(isvc.GROUP, isvc.VERSION, self.ns, isvc.PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _apply(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        current = self._get(name)
        if current is None:
            self.api.create_namespaced_custom_object(isvc.GROUP, isvc.VERSION, self.ns, isvc.PLURAL, body)
            return
        body = json.loads(json.dumps(body))
        body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
        self.api.replace_namespaced_custom_object(isvc.GROUP, isvc.VERSION, self.ns, isvc.PLURAL, name, body)

    def _delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(isvc.GROUP, isvc.VERSION, self.ns, isvc.PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _wait(self, name: str, what: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Poll the InferenceService until `done(obj)`; RolloutFailed naming `what` at the deadline."""
        deadline = self.clock() + self.cfg.serving.ready_timeout_seconds
        while True:
            obj = self._get(name)
            if obj is not None and done(obj):
                return obj
            if self.clock() >= deadline:
                raise RolloutFailed(
                    f"InferenceService {self.ns}/{name}: {what} not reached within "
                    f"{self.cfg.serving.ready_timeout_seconds}s"
                )
            self.sleep(self.poll)

    def _fresh(self, before: dict[str, Any] | None) -> Callable[[dict[str, Any]], bool]:
        """Ready for the spec just applied, not for the one before it.

        Serverless: a new Knative revision was created and is the latest ready one. Raw: the
        Deployment's observedGeneration (copied into status.observedGeneration) moved past `before`'s.
        """
        if self.raw:
            old = ((before or {}).get("status") or {}).get("observedGeneration")
            return lambda o: is_ready(o) and (old is None or (o.get("status") or {}).get("observedGeneration", 0) > old)
        old_rev = predictor_status(before).get("latestCreatedRevision")

        def done(o: dict[str, Any]) -> bool:
            p = predictor_status(o)
            rev = p.get("latestCreatedRevision")
            return is_ready(o) and bool(rev) and rev != old_rev and p.get("latestReadyRevision") == rev

        return done

    def _settled(self, o: dict[str, Any]) -> bool:
        """Ready with nothing newer coming: what an unchanged template reaches (no new revision)."""
        if self.raw:
            return is_ready(o)
        p = predictor_status(o)
        return (
            is_ready(o)
            and bool(p.get("latestCreatedRevision"))
            and p.get("latestReadyRevision") == p.get("latestCreatedRevision")
        )

    def _apply_and_wait(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        before = self._get(name)
        self._apply(body)
        if before is not None and identity(before) == identity(body):
            # A retried step re-applies what its first attempt already applied: no new revision (or
            # Deployment generation) will come, so waiting for one would time out and roll back.
            obj = self._wait(name, "Ready with the new spec", self._settled)
        else:
            obj = self._wait(name, "Ready with the new spec", self._fresh(before))
        if self.raw:  # Ready came from the old pods' Available condition: wait for the new ones
            timeout = self.cfg.serving.ready_timeout_seconds
            raw_deployment.wait_rolled_out(self.apps, self.ns, body, timeout, self.clock, self.sleep, self.poll)
        return obj

    def _serving(self, name: str, revision: str, percent: int) -> dict[str, Any]:
        return self._wait(
            name,
            f"{percent}% of traffic on revision {revision}",
            lambda o: is_ready(o) and traffic_percent(o, revision) == percent,
        )

    # -- one region
    def _restorable(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        if obj is None:
            return None
        meta = obj["metadata"]
        return {
            "apiVersion": obj.get("apiVersion", isvc.API_VERSION),
            "kind": "InferenceService",
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
            "spec": obj["spec"],
        }

    def _check(self, obj: dict[str, Any]) -> str:
        name = obj["metadata"]["name"]
        url = canary_url(obj)
        if not url:
            raise RolloutFailed(f"InferenceService {self.ns}/{name} is Ready but reports no URL")
        self.probe.smoke(url, self.cfg.serving.model_name, self.cfg.smoke_payload())
        watch_canary(self.probe, url, self.cfg, self.clock, self.sleep)
        return url

    def _already_serving(self, current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
        """Idempotent rerun: this model version is live and fully rolled out.

        Compared by identity (labels, model URI, image, args), not by whole spec: KServe's defaulting
        webhook adds fields, and re-applying an unchanged pod template creates no new revision.
        """
        if current is None or not is_ready(current):
            return False
        if identity(current) != identity(desired):
            return False
        if self.raw:
            return raw_deployment.serves(self.apps, self.ns, desired)
        predictor = predictor_status(current)
        latest = predictor.get("latestReadyRevision", "")
        return latest == predictor.get("latestCreatedRevision") and traffic_percent(current, latest) == 100

    def _rollout_region(self, region: RegionConfig, model_uri: str, version: str, image: str) -> str:
        name = isvc.service_name(self.cfg, region)
        build = lambda **kw: isvc.build_inference_service(self.cfg, region, model_uri, image, version, **kw)  # noqa: E731
        current = self._get(name)
        if self._already_serving(current, build()):
            log.info("region %s: model version %s already serves 100%%", region.name, version)
            return str(((current or {}).get("status") or {}).get("url") or "")
        if self.raw:
            return self._rollout_raw(region, build)
        # Without a rolled-out revision KServe ignores canaryTrafficPercent (ksvc_reconciler.go).
        rolled_out = predictor_status(current).get("latestRolledoutRevision")
        canary = self._apply_and_wait(build(canary_percent=self.cfg.serving.canary_percent if rolled_out else None))
        self._check(canary)
        self._checked.append(CANARY_PASSED if rolled_out else SMOKE_CHECKED)
        self._apply(build())
        obj = self._serving(name, predictor_status(canary)["latestReadyRevision"], 100)
        return str((obj.get("status") or {}).get("url") or canary_url(obj))

    def _rollout_raw(self, region: RegionConfig, build: Callable[..., dict[str, Any]]) -> str:
        """The canary InferenceService, checked on live traffic through the router (or by smoke alone), then the main
        service rolled to the new spec; the split goes back to (100, 0) and is removed before the canary goes."""
        name, canary_name = isvc.service_name(self.cfg, region), isvc.canary_name(self.cfg, region)
        stable = self._get(name)
        canary = self._apply_and_wait(build(name=canary_name))
        if self.router is not None and stable is not None:
            self._live_canary(region, stable, canary)
            self._checked.append(CANARY_PASSED)
        else:
            self._check(canary)
            why = "serving.canary_router is none" if self.router is None else f"{name} serves no traffic yet"
            log.warning("region %s: smoke-checked, no canary: %s, so no live traffic reached %s", region.name, why,
                        canary_name)  # fmt: skip
            self._checked.append(SMOKE_CHECKED)
        url = canary_url(self._apply_and_wait(build()))
        # Every replica runs the new model now; it answers on the main URL before the canary goes.
        self.probe.smoke(url, self.cfg.serving.model_name, self.cfg.smoke_payload())
        self._end_split(name, canary_name)
        self._delete(canary_name)
        return url

    def _live_canary(self, region: RegionConfig, stable: dict[str, Any], canary: dict[str, Any]) -> None:
        """Smoke the canary alone, then route `canary_percent` of the live requests to it and guard them."""
        assert self.router is not None
        canary_name = canary["metadata"]["name"]
        url = canary_url(canary)
        if not url:
            raise RolloutFailed(f"InferenceService {self.ns}/{canary_name} is Ready but reports no URL")
        self.probe.smoke(url, self.cfg.serving.model_name, self.cfg.smoke_payload())
        since = read_counts(self.probe.metrics(url))  # before the first live request: the window's baseline
        percent = self.cfg.serving.canary_percent
        self.router.split(stable, canary_name, percent)
        log.info("region %s: %d%% of live traffic to %s (%s route %s)", region.name, percent, canary_name,
                 self.router.kind, split_name(stable["metadata"]["name"]))  # fmt: skip
        health = watch_live(self.probe, url, self.cfg, self.clock, self.sleep, since)
        log.info("region %s: canary passed on %.0f live requests (error rate %.4f, p99 %.0f ms)", region.name,
                 health.requests, health.error_rate, health.p99_ms)  # fmt: skip

    def _end_split(self, name: str, canary_name: str) -> None:
        """All live traffic back on the stable service (weights 100/0) where a split exists, then no split route."""
        if self.router is None:
            return
        stable = self._get(name)
        if stable is not None and self.router.exists(name):
            try:
                self.router.split(stable, canary_name, 0)
            except RolloutFailed as exc:  # KServe's own route still serves the stable service: remove ours anyway
                log.warning("%s: %s", split_name(name), exc)
        self.router.remove(name)

    def _pin_previous(self, name: str) -> str:
        """`canaryTrafficPercent: 0` on the live spec: 100% to the last rolled-out revision, now."""
        live = self._get(name)
        pinned = self._restorable(live)
        if live is None or pinned is None:
            raise RolloutFailed(f"InferenceService {self.ns}/{name} disappeared during the rollback")
        pinned["spec"]["predictor"]["canaryTrafficPercent"] = 0
        self._apply(pinned)
        failed = predictor_status(live).get("latestCreatedRevision", "")
        # After a promotion KServe first moves latestRolledoutRevision back to the previous one.
        obj = self._wait(
            name,
            "all traffic back on the last rolled-out revision",
            lambda o: (
                traffic_percent(o, failed) == 0
                and traffic_percent(o, predictor_status(o).get("latestRolledoutRevision", "")) == 100
            ),
        )
        return str(predictor_status(obj).get("latestRolledoutRevision"))

    def _restore(self, name: str, previous: dict[str, Any]) -> None:
        """Pin, then bring the previous spec back as a new revision and give it the traffic again."""
        pinned = self._pin_previous(name)
        restoring = json.loads(json.dumps(previous))
        restoring["spec"]["predictor"]["canaryTrafficPercent"] = 0
        try:
            restored = self._apply_and_wait(restoring)
        except RolloutFailed as exc:
            raise RolloutFailed(
                f"traffic stays pinned to revision {pinned}; restoring the previous spec failed: {exc}"
            ) from None
        self._apply(previous)
        revision = predictor_status(restored)["latestReadyRevision"]
        percent = previous["spec"]["predictor"].get("canaryTrafficPercent", 100)
        self._serving(name, revision, percent)

    def _rollback_region(self, region: RegionConfig, previous: dict[str, Any] | None) -> None:
        name = isvc.service_name(self.cfg, region)
        if self.raw:
            self._end_split(name, isvc.canary_name(self.cfg, region))
            self._delete(isvc.canary_name(self.cfg, region))
        live = self._get(name)
        if previous is None:
            self._delete(name)
        elif live is not None and live.get("spec") == previous["spec"]:
            if not self.raw and canary_percent(previous["spec"]) > 0:
                # A retried step took its own first attempt's canary for the previous state; no
                # rollout ends on a canary, so pin the traffic to the last rolled-out revision.
                self._pin_previous(name)
            # else: the failure came before the new spec was applied
        elif not self.raw and live is not None and predictor_status(live).get("latestRolledoutRevision"):
            self._restore(name, previous)
        else:
            self._apply(previous)
        log.warning("rolled back region %s (%s)", region.name, "previous revision restored" if previous else "deleted")

    def run(
        self,
        regions: Sequence[RegionConfig],
        model_uri: str,
        version: str,
        image: str,
        placed: Mapping[str, str] | None = None,
    ) -> Outcome:
        """`placed`: region name → the URI of the model's copy in that region's store
        (steps/runtime/storage/region_stores.py
        replicate_to); a region not in it reads `model_uri`."""
        changed: list[tuple[RegionConfig, dict[str, Any] | None]] = []
        url = ""
        self._checked = []
        for region in regions:
            previous = self._restorable(self._get(isvc.service_name(self.cfg, region)))
            changed.append((region, previous))
            try:
                log.info("region %s: rolling out model version %s", region.name, version)
                url = self._rollout_region(region, (placed or {}).get(region.name, model_uri), version, image)
            except Exception as exc:  # noqa: BLE001 — any failure, checks or API, must roll back
                reason = f"region {region.name}: {exc}"
                for done_region, done_previous in reversed(changed):
                    try:
                        self._rollback_region(done_region, done_previous)
                    except Exception as rollback_exc:  # noqa: BLE001 — keep restoring the other regions
                        reason += f"; rollback of {done_region.name} failed: {rollback_exc}"
                return Outcome(ROLLED_BACK, reason=reason, regions=[r.name for r, _ in changed])
        canary = SMOKE_CHECKED if SMOKE_CHECKED in self._checked else (CANARY_PASSED if self._checked else "")
        return Outcome(PROMOTED, url=url, regions=[r.name for r in regions], canary=canary)


def kubernetes_api() -> Any:
    """CustomObjectsApi with the pod's service account (steps/runtime/cluster/objects.py in_cluster_api)."""
    return in_cluster_api()


def kubernetes_apps_api() -> Any:
    """AppsV1Api on the configuration `kubernetes_api()` loaded (RawDeployment reads the predictor Deployment)."""
    from kubernetes import client

    return client.AppsV1Api()
