"""Roll a registered model version out to serving, check it, and promote it or roll it back.

`serving.target: local` — start `python -m steps.serve` as a background process on loopback, wait
for readiness, send smoke requests, move the MLflow alias `champion`, and only then stop the
previous server. A failed check stops the *new* server; the previous one keeps serving.

`serving.target: kserve` — region by region: apply the new revision as a canary, wait for Ready,
smoke-test it, watch its error rate and p99 latency for `canary_window_seconds`, then promote it to
100%. A failure in any region rolls back that region and every region already changed; `champion`
moves only after all regions succeeded.

Exit code 0 when promoted, 3 when rolled back (a verdict: Argo does not retry it; the outcome file
says `rolled-back`), 2 on bad input, 1 on an error a retry may clear.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from paddle_mlops.config.loader import load_regions
from paddle_mlops.config.models import PipelineConfig, RegionConfig
from paddle_mlops.contracts import SERVING_REQUEST_LATENCY_SECONDS, SERVING_REQUESTS_TOTAL
from steps.runtime import inference_service as isvc
from steps.runtime import stepargs
from steps.runtime.processes import stop_group
from steps.runtime.stepargs import StepError

log = stepargs.log
PROJECT_ROOT = Path(__file__).resolve().parents[1]
PROMOTED = "promoted"
ROLLED_BACK = "rolled-back"


class RolloutFailed(Exception):
    """A check failed; the message is the reason recorded on the model version."""


@dataclass
class Outcome:
    outcome: str
    url: str = ""
    reason: str = ""
    regions: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- registry


class Registry(Protocol):
    def promote(self, version: str) -> str | None: ...
    def tag(self, version: str, key: str, value: str) -> None: ...


class MlflowRegistry:
    """`champion` alias and version tags in the MLflow model registry."""

    def __init__(self, cfg: PipelineConfig):
        from steps.runtime import registry

        self._registry = registry
        self._name = cfg.mlflow.registered_model
        self._client = registry.connect(cfg)

    def promote(self, version: str) -> str | None:
        return self._registry.promote(self._name, version, self._client)

    def tag(self, version: str, key: str, value: str) -> None:
        self._client.set_model_version_tag(self._name, version, key, value)


def record(registry: Registry, version: str, outcome: Outcome) -> None:
    registry.tag(version, "rollout.outcome", outcome.outcome)
    if outcome.reason:
        registry.tag(version, "rollout.reason", outcome.reason[:4000])
    if outcome.regions:
        registry.tag(version, "rollout.regions", ",".join(outcome.regions))


# --------------------------------------------------------------------------- HTTP checks


def check_predictions(body: Any, texts: Sequence[str]) -> None:
    """Smoke check of a v1 response: one prediction per text, a known label, probabilities summing to 1."""
    preds = body.get("predictions") if isinstance(body, dict) else None
    if not isinstance(preds, list) or len(preds) != len(texts):
        raise RolloutFailed(f"smoke test: expected {len(texts)} predictions, got {str(body)[:200]}")
    for i, pred in enumerate(preds):
        probs = pred.get("probabilities") if isinstance(pred, dict) else None
        if not isinstance(probs, dict) or pred.get("label") not in probs:
            raise RolloutFailed(f"smoke test: prediction {i} has no label with probabilities: {pred!r}")
        values = list(probs.values())
        if not all(isinstance(p, (int, float)) and 0.0 <= p <= 1.0 for p in values) or not math.isclose(
            sum(values), 1.0, abs_tol=1e-3
        ):
            raise RolloutFailed(f"smoke test: prediction {i} probabilities do not form a distribution: {probs}")


class HttpProbe:
    """Readiness, smoke requests and metrics scrapes against a model server URL."""

    def __init__(self, timeout: float = 10.0):
        self._client = httpx.Client(timeout=timeout)

    def ready(self, url: str, model_name: str) -> bool:
        try:
            return self._client.get(f"{url}/v1/models/{model_name}").status_code == 200
        except httpx.HTTPError:
            return False

    def smoke(self, url: str, model_name: str, texts: Sequence[str]) -> None:
        try:
            resp = self._client.post(f"{url}/v1/models/{model_name}:predict", json={"instances": list(texts)})
        except httpx.HTTPError as exc:
            raise RolloutFailed(f"smoke test: request to {url} failed: {exc}") from None
        if resp.status_code != 200:
            raise RolloutFailed(f"smoke test: {url} answered {resp.status_code}: {resp.text[:300]}")
        check_predictions(resp.json(), texts)

    def metrics(self, url: str) -> str:
        try:
            resp = self._client.get(f"{url}/metrics")
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise RolloutFailed(f"metrics: cannot scrape {url}/metrics: {exc}") from None
        return resp.text


@dataclass(frozen=True)
class Health:
    requests: float
    errors: float
    p99_ms: float

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def parse_health(text: str) -> Health:
    """Error rate (5xx) and p99 latency from the server's `paddle_mlops_serving_*` metrics."""
    requests = errors = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == SERVING_REQUESTS_TOTAL:
                requests += sample.value
                if sample.labels.get("code", "").startswith("5"):
                    errors += sample.value
            elif sample.name == f"{SERVING_REQUEST_LATENCY_SECONDS}_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    total = buckets.get(math.inf, 0.0)
    p99 = 0.0
    if total:
        p99 = next(le for le in sorted(buckets) if buckets[le] >= 0.99 * total) * 1000.0
    return Health(requests, errors, p99)


def watch_canary(
    probe: Any, url: str, cfg: PipelineConfig, clock: Callable[[], float], sleep: Callable[[float], None]
) -> Health:
    """Scrape the canary's metrics for the window; fail as soon as a threshold is crossed."""
    serving = cfg.serving
    end = clock() + serving.canary_window_seconds
    while True:
        health = parse_health(probe.metrics(url))
        if health.error_rate > serving.max_error_rate:
            raise RolloutFailed(
                f"canary unhealthy: error rate {health.error_rate:.3f} > max_error_rate {serving.max_error_rate}"
            )
        if health.p99_ms > serving.max_p99_latency_ms:
            raise RolloutFailed(f"canary unhealthy: p99 latency {health.p99_ms:.0f} ms > {serving.max_p99_latency_ms} ms")
        if clock() >= end:
            return health
        sleep(min(10.0, max(0.0, end - clock())))


# --------------------------------------------------------------------------- local target


def serving_dir(home: Path) -> Path:
    return home / "serving"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); /proc tells it apart on Linux.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def _is_model_server(pid: int) -> bool:
    """Guard against a recycled pid: only signal processes that run `steps.serve`."""
    try:
        return b"steps.serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc").is_dir()


def stop_pid(pid: int, grace_seconds: float = 10.0) -> bool:
    """SIGTERM the server's process group, wait, then SIGKILL. True if something was stopped."""
    if not _alive(pid) or not _is_model_server(pid):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def read_current(home: Path) -> dict[str, Any] | None:
    path = serving_dir(home) / "current.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def stop_local_server(home: Path) -> bool:
    """Stop the server recorded in `<home>/serving/current.json` (`paddle-mlops serve stop`)."""
    current = read_current(home)
    if not current:
        return False
    stopped = stop_pid(int(current["pid"]))
    (serving_dir(home) / "current.json").unlink(missing_ok=True)
    return stopped


def _common_args(args: argparse.Namespace) -> list[str]:
    out = ["--overrides", args.overrides or "[]", "--git-sha", args.git_sha]
    if args.config:
        out += ["--config", str(Path(args.config).resolve())]
    if args.env:
        out += ["--env", args.env]
    return out


def start_local_server(cfg: PipelineConfig, model_uri: str, version: str, home: Path, common: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `python -m steps.serve` detached (own session) so it outlives this step."""
    directory = serving_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    ready_file = directory / f"server-{version}.ready.json"
    ready_file.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "steps.serve", *common,
        "--model-uri", model_uri,
        "--host", cfg.serving.host,
        "--port", str(cfg.serving.port),
        "--model-name", cfg.serving.model_name,
        "--ready-file", str(ready_file),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    with open(directory / f"server-{version}.log", "ab") as logfile:
        proc = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, ready_file


def wait_local_ready(proc: subprocess.Popen[bytes], ready_file: Path, probe: Any, cfg: PipelineConfig, log_path: Path) -> str:
    deadline = time.monotonic() + cfg.serving.ready_timeout_seconds
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise RolloutFailed(f"model server exited with code {code} before it was ready; see {log_path}")
        if ready_file.is_file():
            url = json.loads(ready_file.read_text(encoding="utf-8"))["url"]
            if probe.ready(url, cfg.serving.model_name):
                return url
        time.sleep(0.2)
    raise RolloutFailed(f"model server not ready within {cfg.serving.ready_timeout_seconds}s; see {log_path}")


def rollout_local(
    cfg: PipelineConfig, model_uri: str, version: str, home: Path, registry: Registry, common: list[str], probe: Any = None
) -> Outcome:
    probe = probe or HttpProbe()
    previous = read_current(home)
    proc, ready_file = start_local_server(cfg, model_uri, version, home, common)
    log_path = serving_dir(home) / f"server-{version}.log"
    try:
        url = wait_local_ready(proc, ready_file, probe, cfg, log_path)
        probe.smoke(url, cfg.serving.model_name, cfg.serving.smoke_texts)
    except RolloutFailed as exc:
        stop_group(proc)
        return Outcome(ROLLED_BACK, url=(previous or {}).get("url", ""), reason=str(exc))
    registry.promote(version)
    port = int(url.rsplit(":", 1)[1])
    _write_json(
        serving_dir(home) / "current.json",
        {"pid": proc.pid, "url": url, "port": port, "model_version": version, "model_uri": model_uri},
    )
    # The old server goes only after the new one serves and `champion` points at it.
    if previous and int(previous.get("pid", -1)) != proc.pid:
        stop_pid(int(previous["pid"]))
    return Outcome(PROMOTED, url=url)


# --------------------------------------------------------------------------- kserve target


def is_ready(obj: dict[str, Any]) -> bool:
    """The aggregated Ready condition (PredictorReady and IngressReady, inference_service_status.go).

    It may describe the spec before the last update: callers pair it with a freshness check
    (`KServeRollout._fresh`), because `status.observedGeneration` is the Knative Service's or the
    Deployment's generation, copied over by KServe, never the InferenceService's own.
    """
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def predictor_status(obj: dict[str, Any] | None) -> dict[str, Any]:
    """`status.components.predictor`: revisions and traffic (Serverless mode only)."""
    return (((obj or {}).get("status") or {}).get("components") or {}).get("predictor") or {}


def traffic_percent(obj: dict[str, Any], revision: str) -> int:
    """The share of live traffic a revision gets, summed over its traffic targets."""
    return sum(
        int(t.get("percent") or 0) for t in predictor_status(obj).get("traffic") or [] if t.get("revisionName") == revision
    )


def canary_url(obj: dict[str, Any]) -> str:
    """The URL of the newest revision: its `latest` tag route (tag routing), else the service URL."""
    status = obj.get("status") or {}
    predictor = predictor_status(obj)
    for target in predictor.get("traffic") or []:
        if target.get("tag") == "latest" and target.get("url"):
            return str(target["url"])
    return str(status.get("url") or predictor.get("url") or "")


def identity(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a new revision (labels, model URI, image, args), compared instead of whole specs:
    KServe's defaulting webhook adds fields, and an unchanged pod template creates no revision."""
    meta = obj.get("metadata") or {}
    container = ((obj.get("spec") or {}).get("predictor") or {}).get("containers", [{}])[0]
    uri = (meta.get("annotations") or {}).get("paddle-mlops/model-uri")
    return meta.get("labels"), uri, container.get("image"), container.get("args")


def canary_percent(spec: dict[str, Any]) -> int:
    return int((spec.get("predictor") or {}).get("canaryTrafficPercent") or 0)


class KServeRollout:
    """The region-staged canary state machine over a `CustomObjectsApi`-shaped client.

    Serverless: the new revision gets `canaryTrafficPercent`, then 100%. A rollback pins all traffic
    to the last rolled-out revision with `canaryTrafficPercent: 0` (KServe
    docs/samples/v1beta1/rollout/README.md, "Rollback and pin the model") before the previous spec
    is restored, so the failed revision never again gets live traffic. RawDeployment has no traffic
    split (ksvc_reconciler.go is the only reader of canaryTrafficPercent): the new model is checked
    as a separate `<name>-canary` InferenceService first.
    """

    def __init__(
        self,
        cfg: PipelineConfig,
        api: Any,
        probe: Any,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_seconds: float = 5.0,
    ):
        self.cfg = cfg
        self.api = api
        self.probe = probe
        self.clock = clock
        self.sleep = sleep
        self.poll = poll_seconds
        self.ns = cfg.cluster.namespace
        self.raw = cfg.serving.deployment_mode == "RawDeployment"

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
                    f"InferenceService {self.ns}/{name}: {what} not reached within {self.cfg.serving.ready_timeout_seconds}s"
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
        return is_ready(o) and bool(p.get("latestCreatedRevision")) and p.get("latestReadyRevision") == p.get("latestCreatedRevision")

    def _apply_and_wait(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        before = self._get(name)
        self._apply(body)
        if before is not None and identity(before) == identity(body):
            # A retried step re-applies what its first attempt already applied: no new revision (or
            # Deployment generation) will come, so waiting for one would time out and roll back.
            return self._wait(name, "Ready with the new spec", self._settled)
        return self._wait(name, "Ready with the new spec", self._fresh(before))

    def _serving(self, name: str, revision: str, percent: int) -> dict[str, Any]:
        return self._wait(
            name, f"{percent}% of traffic on revision {revision}", lambda o: is_ready(o) and traffic_percent(o, revision) == percent
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
        self.probe.smoke(url, self.cfg.serving.model_name, self.cfg.serving.smoke_texts)
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
            return True
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
            canary = build(name=isvc.canary_name(self.cfg, region))
            self._check(self._apply_and_wait(canary))
            url = canary_url(self._apply_and_wait(build()))
            self._delete(canary["metadata"]["name"])
            return url
        # Without a rolled-out revision KServe ignores canaryTrafficPercent (ksvc_reconciler.go).
        rolled_out = predictor_status(current).get("latestRolledoutRevision")
        canary = self._apply_and_wait(build(canary_percent=self.cfg.serving.canary_percent if rolled_out else None))
        self._check(canary)
        self._apply(build())
        obj = self._serving(name, predictor_status(canary)["latestReadyRevision"], 100)
        return str((obj.get("status") or {}).get("url") or canary_url(obj))

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
            lambda o: traffic_percent(o, failed) == 0
            and traffic_percent(o, predictor_status(o).get("latestRolledoutRevision", "")) == 100,
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
            raise RolloutFailed(f"traffic stays pinned to revision {pinned}; restoring the previous spec failed: {exc}") from None
        self._apply(previous)
        revision = predictor_status(restored)["latestReadyRevision"]
        percent = previous["spec"]["predictor"].get("canaryTrafficPercent", 100)
        self._serving(name, revision, percent)

    def _rollback_region(self, region: RegionConfig, previous: dict[str, Any] | None) -> None:
        name = isvc.service_name(self.cfg, region)
        if self.raw:
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

    def run(self, regions: Sequence[RegionConfig], model_uri: str, version: str, image: str) -> Outcome:
        changed: list[tuple[RegionConfig, dict[str, Any] | None]] = []
        url = ""
        for region in regions:
            previous = self._restorable(self._get(isvc.service_name(self.cfg, region)))
            changed.append((region, previous))
            try:
                log.info("region %s: rolling out model version %s", region.name, version)
                url = self._rollout_region(region, model_uri, version, image)
            except Exception as exc:  # noqa: BLE001 — any failure, checks or API, must roll back
                reason = f"region {region.name}: {exc}"
                for done_region, done_previous in reversed(changed):
                    try:
                        self._rollback_region(done_region, done_previous)
                    except Exception as rollback_exc:  # noqa: BLE001 — keep restoring the other regions
                        reason += f"; rollback of {done_region.name} failed: {rollback_exc}"
                return Outcome(ROLLED_BACK, reason=reason, regions=[r.name for r, _ in changed])
        return Outcome(PROMOTED, url=url, regions=[r.name for r in regions])


def kubernetes_api() -> Any:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi()


def resolve_regions(cfg: PipelineConfig, names: Sequence[str], config_dir: Path | None) -> list[RegionConfig]:
    known = load_regions(config_dir)
    missing = [n for n in names if n not in known]
    if missing:
        raise StepError(f"unknown region(s) {', '.join(missing)}; known regions: {', '.join(sorted(known)) or 'none'} (configs/regions/)")
    return [known[n] for n in names]


# --------------------------------------------------------------------------- step


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m steps.rollout", description=__doc__.split("\n\n")[0])
    stepargs.add_common_args(parser)
    parser.add_argument("--model-uri", required=True, help="published model version (upload step's model-uri)")
    parser.add_argument("--model-version", required=True, help="MLflow model version (register step's output)")
    parser.add_argument("--region", default=None, help="the run's region when serving.regions is empty")
    parser.add_argument("--image-digest", default=None, help="serve image digest from build-image (pins the image)")
    parser.add_argument("--url-out", default=None, help="output parameter file: serving URL")
    parser.add_argument("--outcome-out", default=None, help="output parameter file: promoted | rolled-back")
    return stepargs.parse(parser, argv)


def main(argv: Sequence[str] | None = None, registry: Registry | None = None, api: Any = None, probe: Any = None) -> int:
    args = _parse_args(argv)

    def body() -> int:
        cfg = stepargs.config_from_args(args)
        reg = registry or MlflowRegistry(cfg)
        if cfg.serving.target == "local":
            outcome = rollout_local(cfg, args.model_uri, args.model_version, stepargs.home_dir(), reg, _common_args(args), probe)
        else:
            names = list(cfg.serving.regions) or [args.region or cfg.cluster.region]
            config_dir = Path(args.config).resolve().parent if args.config else None
            regions = resolve_regions(cfg, names, config_dir)
            image = isvc.pin_image(cfg.images.serve, args.image_digest)
            machine = KServeRollout(cfg, api or kubernetes_api(), probe or HttpProbe())
            outcome = machine.run(regions, args.model_uri, args.model_version, image)
            if outcome.outcome == PROMOTED:
                reg.promote(args.model_version)
        record(reg, args.model_version, outcome)
        stepargs.write_output(args.outcome_out, outcome.outcome)
        stepargs.write_output(args.url_out, outcome.url)
        if outcome.outcome != PROMOTED:
            print(
                f"[rollout] rolled back model version {args.model_version}: {outcome.reason}. "
                "The previous version keeps serving and 'champion' is unchanged.",
                file=sys.stderr,
            )
            return stepargs.EXIT_ROLLED_BACK
        print(f"[rollout] model version {args.model_version} promoted; serving at {outcome.url}")
        return stepargs.EXIT_OK

    return stepargs.run_step("rollout", body)


if __name__ == "__main__":
    sys.exit(main())
