"""Every alert can fire: its label matchers name labels the stored series really carry, and its
counter expressions see a counter's first increment.

Upstream behaviour encoded here:
- prometheus/prometheus scrape/scrape.go `mutateSampleLabels` and `resolveConflictingExposedLabels`
  (v2.x to v3.x): with honor_labels false a target label overwrites an exposed label of the same
  name, whose value moves to `exported_<name>`; with honor_labels true the exposed label wins.
- prometheus-operator v0.93.0 pkg/prometheus/promcfg.go `generatePodMonitorConfig`: keep rules for
  the selector (`__meta_kubernetes_pod_label_<sanitised>` / `_labelpresent_`) and the port, then
  target labels `namespace`, `container`, `pod`, `job` = `<namespace>/<monitor>`, `endpoint`, then
  our relabelings; `AddHonorLabels` writes the endpoint's honorLabels.
- argo-workflows v4.1.2 util/telemetry/builder/values.yaml (TotalCount: phase, namespace; Gauge and
  PodsGauge: phase; ErrorCount: cause), util/telemetry/exporter_prometheus.go (`argo_workflows_`
  prefix, no suffixes), workflow/metrics/metrics_custom.go (a custom counter's value starts at 0
  and is incremented before its first export: the first sample is 1; labels are the template's).
- NVIDIA/dcgm-exporter internal/pkg/transformation/const.go (the GPU's pod as `pod`, `namespace`,
  `container`) and deployment/values.yaml (`serviceMonitor.honorLabels: false`).
- kube-state-metrics docs/metrics/workload/pod-metrics.md, scraped by kube-prometheus-stack with
  honorLabels: true.
- prometheus/prometheus promql/functions.go `extrapolatedRate` (increase) and the set operators'
  matching on all labels but `__name__` (promql/engine.go VectorOr / VectorUnless).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops import contracts
from paddle_mlops.compile import default_compile_config
from paddle_mlops.config import PipelineConfig
from paddle_mlops.contracts import ROLLOUT_OUTCOME, STEP_RESULT
from pipelines import observability as obs
from pipelines import paddlejob
from steps.runtime import inference_service as isvc
from steps.runtime.metrics import TrainingMetrics

ROOT = Path(__file__).resolve().parents[1]
FREE = object()  # a label whose value is data (any value), as opposed to one fixed by the target


# ------------------------------------------------------------------ Prometheus' target-label merge


def merge(exposed: dict[str, Any], target: dict[str, Any], honor: bool) -> dict[str, Any]:
    """The stored labels of one exposed series (scrape.go mutateSampleLabels)."""
    out = dict(exposed)
    if honor:
        for name, value in target.items():
            out.setdefault(name, value)
        return out
    conflicts = sorted(((n, exposed[n]) for n in target if n in exposed), key=lambda kv: len(kv[0]))
    out.update(target)
    for name, value in conflicts:
        new = name
        while True:
            new = "exported_" + new
            if new not in out:
                out[new] = value
                break
    return out


def test_merge_follows_prometheus() -> None:
    target = {"namespace": "argo", "pod": "ctrl", "job": "j"}
    assert merge({"namespace": "team"}, target, honor=True)["namespace"] == "team"
    stored = merge({"namespace": "team", "exported_namespace": "x"}, target, honor=False)
    assert stored["namespace"] == "argo" and stored["exported_exported_namespace"] == "team"


# ------------------------------------------------------------------ relabelling (prometheus-operator)


def _sanitise(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def relabel(meta: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus relabel_config, actions keep/replace; None when the target is dropped."""
    labels = dict(meta)
    for rule in rules:
        source = ";".join(labels.get(s, "") for s in rule.get("sourceLabels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), source)
        action = rule.get("action", "replace")
        if action == "keep":
            if not match:
                return None
        elif action == "replace" and match:
            value = match.expand(re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", rule.get("replacement", "$1")))
            if value:
                labels[rule["targetLabel"]] = value
            else:
                labels.pop(rule["targetLabel"], None)
    return labels


@dataclass(frozen=True)
class Container:
    """One container port of a pod, as Kubernetes service discovery sees it."""

    pod: str
    namespace: str
    labels: dict[str, str]
    container: str
    port_name: str
    port: int
    controller_kind: str = ""
    controller_name: str = ""


def pod_monitor_targets(monitor: dict[str, Any], containers: list[Container]) -> list[dict[str, Any]]:
    """Target labels of every container port a PodMonitor keeps (promcfg.go generatePodMonitorConfig)."""
    spec = monitor["spec"]
    (endpoint,) = spec["podMetricsEndpoints"]
    rules: list[dict[str, Any]] = []
    for key, value in spec["selector"].get("matchLabels", {}).items():
        rules.append({"sourceLabels": [f"__meta_kubernetes_pod_label_{_sanitise(key)}",
                                       f"__meta_kubernetes_pod_labelpresent_{_sanitise(key)}"],
                      "regex": f"({value});true", "action": "keep"})  # fmt: skip
    for exp in spec["selector"].get("matchExpressions", []):
        assert exp["operator"] == "Exists", "emulated: Exists only"
        rules.append({"sourceLabels": [f"__meta_kubernetes_pod_labelpresent_{_sanitise(exp['key'])}"],
                      "regex": "true", "action": "keep"})  # fmt: skip
    if endpoint.get("port"):
        rules.append(
            {"sourceLabels": ["__meta_kubernetes_pod_container_port_name"], "regex": endpoint["port"], "action": "keep"}
        )
    rules += [
        {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": "namespace"},
        {"sourceLabels": ["__meta_kubernetes_pod_container_name"], "targetLabel": "container"},
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
        {"targetLabel": "job", "replacement": f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"},
    ]
    if endpoint.get("port"):
        rules.append({"targetLabel": "endpoint", "replacement": endpoint["port"]})
    rules += endpoint.get("relabelings", [])
    targets = []
    for c in containers:
        if c.namespace not in spec["namespaceSelector"]["matchNames"]:
            continue
        meta = {
            "__address__": f"10.0.0.1:{c.port}",
            "__meta_kubernetes_namespace": c.namespace,
            "__meta_kubernetes_pod_name": c.pod,
            "__meta_kubernetes_pod_container_name": c.container,
            "__meta_kubernetes_pod_container_port_name": c.port_name,
            "__meta_kubernetes_pod_container_port_number": str(c.port),
            "__meta_kubernetes_pod_controller_kind": c.controller_kind,
            "__meta_kubernetes_pod_controller_name": c.controller_name,
        }
        for key, value in c.labels.items():
            meta[f"__meta_kubernetes_pod_label_{_sanitise(key)}"] = value
            meta[f"__meta_kubernetes_pod_labelpresent_{_sanitise(key)}"] = "true"
        labels = relabel(meta, rules)
        if labels is not None:
            labels["instance"] = labels["__address__"]
            targets.append({k: v for k, v in labels.items() if not k.startswith("__")})
    return targets


# ------------------------------------------------------------------ the pods and what they export


def training_containers(cfg: PipelineConfig) -> list[Container]:
    job = paddlejob.build_paddlejob(cfg).manifest
    template = job["spec"]["paddleReplicaSpecs"]["Worker"]["template"]
    (container,) = template["spec"]["containers"]
    labels = {**template["metadata"]["labels"], "training.kubeflow.org/replica-type": "worker"}
    return [
        Container("wf-train-x-worker-0", cfg.cluster.namespace, labels, container["name"], p["name"],
                  p["containerPort"], "PaddleJob", "wf-train-x")
        for p in container.get("ports", [])
    ]  # fmt: skip


def serving_containers(cfg: PipelineConfig) -> list[Container]:
    """A Serverless predictor pod: KServe's labels (predictor.go buildObjectMeta), Knative's revision
    label and queue-proxy's ports beside the model server's."""
    region = next(iter(__import__("paddle_mlops.config.loader", fromlist=["x"]).load_regions().values()))
    body = isvc.build_inference_service(cfg, region, "s3://m/1", "img", "7")
    name = body["metadata"]["name"]
    labels = {
        **body["metadata"]["labels"],
        "serving.kserve.io/inferenceservice": name,
        "component": "predictor",
        "serving.knative.dev/revision": f"{name}-predictor-00001",
    }
    (c,) = body["spec"]["predictor"]["containers"]
    pod = f"{name}-predictor-00001-deployment-abc"
    ns = cfg.cluster.namespace
    return [
        Container(pod, ns, labels, c["name"], "user-port", c["ports"][0]["containerPort"]),
        Container(pod, ns, labels, "queue-proxy", "http-queueadm", 8022),
        Container(pod, ns, labels, "queue-proxy", "http-usermetric", 9091),
    ]


def argo_containers() -> list[Container]:
    # argo-workflows manifests/base/workflow-controller/workflow-controller-deployment.yaml
    labels = {"app": "workflow-controller"}
    return [
        Container("workflow-controller-0", obs.CONTROLLER_NAMESPACE, labels, "workflow-controller", "metrics", 9090),
        Container("workflow-controller-0", obs.CONTROLLER_NAMESPACE, labels, "workflow-controller", "", 6060),
    ]


def _declared_labels(source: Path) -> dict[str, list[str]]:
    """prometheus_client metrics a module constructs -> their label names (third argument)."""
    found = {}
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"Counter", "Histogram", "Gauge"}:
            name = _metric_name(node.args[0]) if node.args else None
            if name and len(node.args) >= 3:
                found[name] = [ast.literal_eval(e) for e in node.args[2].elts]
            elif name:
                found[name] = []
    return found


def _metric_name(node: ast.expr) -> str | None:
    """A metric's name argument: a string literal, or a name from paddle_mlops.contracts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(getattr(contracts, node.id, None), str):
        return str(getattr(contracts, node.id))
    return None


def _series(name: str, labels: list[str], histogram: bool) -> dict[str, dict[str, Any]]:
    exposed = dict.fromkeys(labels, FREE)
    if not histogram:
        return {name: exposed}
    return {name + "_bucket": {**exposed, "le": FREE}, name + "_sum": exposed, name + "_count": exposed}


@dataclass
class Source:
    """One exporter: its series (name -> exposed labels), the targets it is scraped as, honor_labels."""

    series: dict[str, dict[str, Any]]
    targets: list[dict[str, Any]]
    honor: bool


@dataclass
class Store:
    """What Prometheus stores: metric name -> the label sets of its series."""

    series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, source: Source) -> None:
        for target in source.targets:
            self.series.setdefault("up", []).append(dict(target))
            for name, exposed in source.series.items():
                self.series.setdefault(name, []).append(merge(exposed, target, source.honor))


def _monitor(monitoring: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in monitoring if d["metadata"]["name"] == name)


def store_for(monitoring: list[dict[str, Any]], cfg: PipelineConfig, dcgm_honor: bool) -> Store:
    """Every series an alert may name, as stored, for these monitors."""
    store = Store()
    trainer = {}
    for family in TrainingMetrics(gpu=True).registry.collect():
        trainer |= _series(family.name, [], family.type == "histogram")
    train_monitor = _monitor(monitoring, "paddle-mlops-training")
    store.add(Source(trainer, pod_monitor_targets(train_monitor, training_containers(cfg)), _honor(train_monitor)))

    serving = {}
    for name, labels in _declared_labels(ROOT / "steps" / "runtime" / "serving.py").items():
        histogram = not name.endswith("_total")
        serving |= _series(name, labels, histogram)
    serve_monitor = _monitor(monitoring, "paddle-mlops-serving")
    store.add(Source(serving, pod_monitor_targets(serve_monitor, serving_containers(cfg)), _honor(serve_monitor)))

    argo = {
        "argo_workflows_total_count": {"phase": FREE, "namespace": FREE},
        "argo_workflows_gauge": {"phase": FREE},
        "argo_workflows_pods_gauge": {"phase": FREE},
        "argo_workflows_error_count": {"cause": FREE},
    }
    for template in ("train", "evaluate", "rollout"):
        for metric in obs.argo_template_metrics(template)["prometheus"]:
            argo[obs.ARGO_CUSTOM_PREFIX + metric["name"]] = {label["key"]: FREE for label in metric.get("labels", [])}
    argo_monitor = _monitor(monitoring, "argo-workflow-controller")
    if argo_monitor["kind"] == "ServiceMonitor":
        endpoint = argo_monitor["spec"]["endpoints"][0]
        targets = [{"namespace": obs.CONTROLLER_NAMESPACE, "pod": FREE, "container": FREE, "service": "workflow-controller-metrics",
                    "job": "workflow-controller-metrics", "endpoint": "metrics", "instance": FREE}]  # fmt: skip
    else:
        endpoint = argo_monitor["spec"]["podMetricsEndpoints"][0]
        targets = pod_monitor_targets(argo_monitor, argo_containers())
    store.add(Source(argo, targets, bool(endpoint.get("honorLabels"))))

    def service_target(ns: str, job: str) -> dict[str, Any]:
        return {
            "namespace": ns,
            "pod": FREE,
            "container": FREE,
            "service": job,
            "job": job,
            "endpoint": "http",
            "instance": FREE,
        }

    pod = {"namespace": FREE, "pod": FREE, "uid": FREE}
    ksm = {
        "kube_pod_owner": {**pod, "owner_kind": FREE, "owner_name": FREE, "owner_is_controller": FREE},
        "kube_pod_status_phase": {**pod, "phase": FREE},
        "kube_pod_container_status_restarts_total": {**pod, "container": FREE},
    }
    store.add(Source(ksm, [service_target("monitoring", "kube-state-metrics")], honor=True))
    gpu = {"gpu": FREE, "UUID": FREE, "device": FREE, "modelName": FREE, "Hostname": FREE,
           "pod": FREE, "namespace": FREE, "container": FREE}  # fmt: skip
    dcgm = dict.fromkeys(obs.EXTERNAL_METRICS["dcgm-exporter"], gpu)
    store.add(Source(dcgm, [service_target("gpu-operator", "nvidia-dcgm-exporter")], honor=dcgm_honor))
    return store


def _honor(monitor: dict[str, Any]) -> bool:
    return bool(monitor["spec"]["podMetricsEndpoints"][0].get("honorLabels"))


# ------------------------------------------------------------------ alert matchers against the store

_SELECTOR = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_LABEL_REPLACE = re.compile(
    r'label_replace\(\s*(?P<inner>[A-Za-z_:][\w:]*(?:\{[^}]*\})?|__lr\d+)\s*,\s*"(?P<dst>\w+)"\s*,\s*"\$1"\s*,'
    r'\s*"(?P<src>\w+)"\s*,\s*"\(\.\+\)"\s*\)'
)
_GROUPING = re.compile(r"\b(by|on|group_left|group_right)\s*\(([^)]*)\)")


def _matches(labels: dict[str, Any], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op in ("=", "=~") and not (value == "" and op == "="):
            if name not in labels:
                return False
            if have is not FREE and not re.fullmatch(value if op == "=~" else re.escape(value), have):
                return False
    return True


def alert_problems(expr: str, store: Store) -> list[str]:
    """Selectors that match no stored series; grouping labels no operand carries."""
    problems: list[str] = []
    sets: dict[str, list[dict[str, Any]]] = {}
    text = expr
    # label_replace(x, "dst", "$1", "src", "(.+)") copies src to dst where src has a value.
    while (m := _LABEL_REPLACE.search(text)) is not None:
        inner = m.group("inner")
        key = f"__lr{len(sets)}"
        base = sets[inner] if inner in sets else _select(inner, store, problems)
        sets[key] = [{**s, m.group("dst"): s[m.group("src")]} if s.get(m.group("src")) else s for s in base]
        text = text[: m.start()] + key + text[m.end() :]
    operands = list(sets.values())
    for m in _SELECTOR.finditer(text):
        operands.append(_select(m.group(0), store, problems))
    for name in set(re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b(?![({\w])", _SELECTOR.sub("", text))):
        if name in store.series:
            operands.append(store.series[name])
    for kind, names in _GROUPING.findall(text):
        for label in (n.strip() for n in names.split(",") if n.strip()):
            carriers = [any(label in s for s in op) for op in operands]
            need = all(carriers) if kind == "on" else any(carriers)
            if not need:
                problems.append(f"`{kind} ({label})`: not on {'every' if kind == 'on' else 'any'} operand")
    return problems


def _select(selector: str, store: Store, problems: list[str]) -> list[dict[str, Any]]:
    m = _SELECTOR.fullmatch(selector)
    name, matchers = (m.group(1), _MATCHER.findall(m.group(2))) if m else (selector, [])
    chosen = [s for s in store.series.get(name, []) if _matches(s, matchers)]
    if not chosen:
        problems.append(f"{selector} matches no stored series (have: {_describe(store.series.get(name, []))})")
    return chosen


def _describe(series: list[dict[str, Any]]) -> str:
    return (
        "; ".join(", ".join(f"{k}={'*' if v is FREE else v}" for k, v in sorted(s.items())) for s in series[:2])
        or "none"
    )


@pytest.fixture(scope="module")
def cfg() -> PipelineConfig:
    return default_compile_config()


@pytest.mark.parametrize("dcgm_honor", [False, True], ids=["dcgm-chart-default", "dcgm-honorLabels"])
def test_every_alert_matches_stored_series(cfg: PipelineConfig, dcgm_honor: bool) -> None:
    monitoring = obs.render_observability(cfg)["monitoring.yaml"]
    store = store_for(monitoring, cfg, dcgm_honor)
    for rule in obs.alert_rules(cfg):
        assert alert_problems(rule["expr"], store) == [], rule["alert"]


def test_every_dashboard_query_matches_stored_series(cfg: PipelineConfig) -> None:
    rendered = obs.render_observability(cfg)
    store = store_for(rendered["monitoring.yaml"], cfg, dcgm_honor=False)
    for dashboard in obs.dashboards(cfg):
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                assert alert_problems(target["expr"], store) == [], f"{dashboard['uid']}: {panel['title']}"


def test_the_check_catches_the_alerts_of_issue_15(cfg: PipelineConfig) -> None:
    """Before #15: the controller's `namespace` ended up in `exported_namespace`, and DCGM's pod in
    `exported_pod` (the chart scrapes without honorLabels)."""
    monitoring = obs.render_observability(cfg)["monitoring.yaml"]
    argo = _monitor(monitoring, "argo-workflow-controller")
    argo["spec"]["podMetricsEndpoints"][0]["honorLabels"] = False
    store = store_for(monitoring, cfg, dcgm_honor=False)
    ns = cfg.cluster.namespace
    assert alert_problems(
        f'increase(argo_workflows_total_count{{namespace="{ns}", phase=~"Failed|Error"}}[1h]) > 0', store
    )
    assert alert_problems(
        f'(avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}"}}) < 5) and on (namespace, pod) '
        f'kube_pod_owner{{namespace="{ns}", owner_kind="PaddleJob"}}',
        store,
    )


def test_monitors_keep_the_pods_they_are_for(cfg: PipelineConfig) -> None:
    """Each PodMonitor keeps exactly the metrics port of its pods, and the relabelled labels arrive."""
    monitoring = obs.render_observability(cfg)["monitoring.yaml"]
    (train,) = pod_monitor_targets(_monitor(monitoring, "paddle-mlops-training"), training_containers(cfg))
    assert train["instance"].endswith(f":{cfg.training.metrics_port}") and train["paddlejob"] == "wf-train-x"
    (serve,) = pod_monitor_targets(_monitor(monitoring, "paddle-mlops-serving"), serving_containers(cfg))
    assert serve["instance"].endswith(f":{obs.SERVING_PORT}")
    assert {"isvc", "revision", "component", "model_version", "region"} <= set(serve)
    (argo,) = pod_monitor_targets(_monitor(monitoring, "argo-workflow-controller"), argo_containers())
    assert argo["instance"].endswith(":9090")


def test_argo_metrics_port_is_the_controller_config_port() -> None:
    from pipelines.platform.argo_controller import METRICS_PORT

    # The monitor scrapes the controller's port named `metrics`, which Argo's manifests put on 9090.
    assert METRICS_PORT == 9090


# ------------------------------------------------------------------ counters born at 1

Sample = tuple[float, float]
_TOKENS = re.compile(r"\s*(\(|\)|\[[^\]]+\]|>|\d+[smhd]\b|[A-Za-z_:][\w:]*(?:\{[^}]*\})?|\d+(?:\.\d+)?)")
LOOKBACK = 300.0


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[duration[-1]]


class Evaluator:
    """Instant evaluation of the PromQL subset `_counted_in` writes: selectors, `offset`,
    `increase(sel[d])`, `> N`, `unless`, `or`, parentheses."""

    def __init__(self, series: dict[frozenset[tuple[str, str]], list[Sample]], at: float) -> None:
        self.series, self.at = series, at

    def run(self, expr: str) -> dict[frozenset[tuple[str, str]], float]:
        self.tokens = [t for t in _TOKENS.findall(expr) if t]
        assert re.sub(r"\s+", "", "".join(self.tokens)) == re.sub(r"\s+", "", expr), f"unsupported PromQL: {expr}"
        self.pos = 0
        out = self._or()
        assert self.pos == len(self.tokens)
        return out

    def _peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def _next(self) -> str:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _or(self) -> dict:
        left = self._unless()
        while self._peek() == "or":
            self._next()
            right = self._unless()
            seen = {_sig(k) for k in left}
            left = {**left, **{k: v for k, v in right.items() if _sig(k) not in seen}}
        return left

    def _unless(self) -> dict:
        left = self._cmp()
        while self._peek() == "unless":
            self._next()
            drop = {_sig(k) for k in self._cmp()}
            left = {k: v for k, v in left.items() if _sig(k) not in drop}
        return left

    def _cmp(self) -> dict:
        value = self._primary()
        if self._peek() == ">":
            self._next()
            limit = float(self._next())
            value = {k: v for k, v in value.items() if v > limit}
        return value

    def _primary(self) -> dict:
        token = self._next()
        if token == "(":
            value = self._or()
            assert self._next() == ")"
            return value
        if token == "increase":
            assert self._next() == "("
            selector, window = self._next(), _seconds(self._next()[1:-1])
            assert self._next() == ")"
            return self._increase(selector, window)
        offset = 0.0
        if self._peek() == "offset":
            self._next()
            offset = _seconds(self._next())
        return self._instant(token, self.at - offset)

    def _matching(self, selector: str):
        m = _SELECTOR.fullmatch(selector)
        name, matchers = (m.group(1), _MATCHER.findall(m.group(2))) if m else (selector, [])
        for labels, samples in self.series.items():
            d = dict(labels)
            if d.get("__name__") == name and all(
                re.fullmatch(v if op == "=~" else re.escape(v), d.get(n, "")) for n, op, v in matchers
            ):
                yield labels, samples

    def _instant(self, selector: str, t: float) -> dict:
        out = {}
        for labels, samples in self._matching(selector):
            recent = [v for ts, v in samples if t - LOOKBACK < ts <= t]
            if recent:
                out[labels] = recent[-1]
        return out

    def _increase(self, selector: str, window: float) -> dict:
        """promql/functions.go extrapolatedRate(isCounter=true, isRate=false)."""
        out = {}
        start, end = self.at - window, self.at
        for labels, samples in self._matching(selector):
            points = [(ts, v) for ts, v in samples if start < ts <= end]
            if len(points) < 2:
                continue
            result = points[-1][1] - points[0][1]
            result += sum(prev for (_, prev), (_, cur) in zip(points, points[1:], strict=False) if cur < prev)
            sampled = points[-1][0] - points[0][0]
            to_start, to_end = points[0][0] - start, end - points[-1][0]
            average = sampled / (len(points) - 1)
            if result > 0 and points[0][1] >= 0:
                to_start = min(to_start, sampled * points[0][1] / result)
            limit = average * 1.1
            interval = (
                sampled + (to_start if to_start < limit else average / 2) + (to_end if to_end < limit else average / 2)
            )
            out[frozenset((k, v) for k, v in labels if k != "__name__")] = result * interval / sampled
        return out


def _sig(labels: frozenset[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in labels if k != "__name__")


def counter(name: str, born: float, increments: list[float], until: float, **labels: str):
    """A counter scraped every 30 s from its birth at 1 (Argo creates it at its first increment)."""
    key = frozenset({"__name__": name, **labels}.items())
    samples, value, t = [], 1.0, born
    while t <= until:
        value += sum(1 for i in increments if t - 30 < i <= t)
        samples.append((t, value))
        t += 30
    return key, samples


H = 3600.0


def _rules(cfg: PipelineConfig) -> dict[str, str]:
    return {r["alert"]: r["expr"] for r in obs.alert_rules(cfg)}


def _cases(cfg: PipelineConfig) -> list[tuple[str, str, dict[str, str], dict[str, str]]]:
    """(alert, metric, labels of a series that must alert, labels of one that must not)."""
    ns = cfg.cluster.namespace
    return [
        ("PaddleMLOpsWorkflowFailed", "argo_workflows_total_count",
         {"namespace": ns, "phase": "Failed"}, {"namespace": ns, "phase": "Succeeded"}),
        ("PaddleMLOpsStepFailed", obs.ARGO_CUSTOM_PREFIX + STEP_RESULT,
         {"step": "train", "status": "Failed"}, {"step": "train", "status": "Succeeded"}),
        ("PaddleMLOpsRolledBack", obs.ARGO_CUSTOM_PREFIX + ROLLOUT_OUTCOME,
         {"outcome": "rolled-back"}, {"outcome": "promoted"}),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(3))
def test_counter_alerts_fire_on_the_first_event(cfg: PipelineConfig, case: int) -> None:
    alert, metric, bad, good = _cases(cfg)[case]
    expr = _rules(cfg)[alert]
    now = 10 * H
    first = dict([counter(metric, now - 300, [], now, **bad)])
    assert Evaluator(first, now).run(expr), f"{alert} misses the first event"
    benign = dict([counter(metric, now - 300, [], now, **good)])
    assert not Evaluator(benign, now).run(expr)
    later = dict([counter(metric, now - 5 * H, [now - 600], now, **bad)])
    assert Evaluator(later, now).run(expr), f"{alert} misses a later event"
    quiet = dict([counter(metric, now - 8 * H, [], now, **bad)])
    assert not Evaluator(quiet, now).run(expr), f"{alert} fires with nothing new"
    window = 7 * H if alert == "PaddleMLOpsRolledBack" else 2 * H
    old = dict([counter(metric, now - window, [], now, **bad)])
    assert not Evaluator(old, now).run(expr), f"{alert} keeps firing after its window"


def test_plain_increase_misses_a_counter_born_at_one() -> None:
    """The expression before #15: `increase()` needs two samples and sees 1 -> 1 as no change."""
    now = 10 * H
    series = dict([counter("c_total", now - 300, [], now, status="Failed")])
    assert not Evaluator(series, now).run('increase(c_total{status="Failed"}[1h]) > 0')
    assert Evaluator(series, now).run("(increase(c_total[1h]) > 0) or (c_total unless c_total offset 1h)")
