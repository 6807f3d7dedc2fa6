"""What Prometheus stores for a scraped pod: the targets a PodMonitor keeps, and the labels of each
series once the target's labels are merged in.

- prometheus/prometheus scrape/scrape.go `mutateSampleLabels` and `resolveConflictingExposedLabels`
  (v2.x to v3.x): with honor_labels false a target label overwrites an exposed label of the same
  name, whose value moves to `exported_<name>`; with honor_labels true the exposed label wins.
- prometheus-operator v0.93.0 pkg/prometheus/promcfg.go `generatePodMonitorConfig`: keep rules for
  the selector (`__meta_kubernetes_pod_label_<sanitised>` / `_labelpresent_`) and the port, then
  target labels `namespace`, `container`, `pod`, `job` = `<namespace>/<monitor>`, `endpoint`, then
  our relabelings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FREE = object()  # a label whose value is data (any value), as opposed to one fixed by the target


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
