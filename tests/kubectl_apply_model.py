"""How the three ways of writing into an upstream object treat the keys of the other writer, as kubectl and the API
server do it, and the upstream objects our controller settings are written into.

- `client_side_apply`: kubectl pkg/cmd/apply/patcher.go builds the patch with apimachinery
  pkg/util/strategicpatch/patch.go CreateThreeWayMergePatch(original = the live object's
  kubectl.kubernetes.io/last-applied-configuration, modified = the file, current = live): it deletes what `original`
  has and `modified` lacks (whoever wrote `original`), sets what `modified` has, and writes `modified` as the new
  annotation.
- `strategic_patch`: `kubectl patch --type strategic`: maps merge key by key, lists with a patchMergeKey (containers,
  env: `name`) merge item by item, nothing is deleted unless the patch says null; no annotation, and the field
  ownership it records is an Update (never pruned by anyone's apply).
- `kubectl_server_side_apply`: the API server's Apply (structured-merge-diff merge/update.go: a manager's fields are
  those it applied; fields it applied before and no longer sends are removed unless another manager owns them), and
  what kubectl does after it on an object a client-side apply wrote (pkg/cmd/apply/apply.go
  migrateToSSAIfNecessary → csaupgrade.UpgradeManagedFieldsPatch): the Update manager that owns the last-applied
  annotation hands all its fields to the server-side manager, and kubectl applies the file again.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import yaml

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name"}
Path = tuple[str, ...]


@dataclass
class Live:
    """An object in the API server: its content and who manages which leaf field (manager → (operation, paths))."""

    obj: dict[str, Any]
    managers: dict[str, tuple[str, set[Path]]] = field(default_factory=dict)


def leaves(node: Any, prefix: Path = ()) -> set[Path]:
    if isinstance(node, dict):
        return {p for k, v in node.items() for p in leaves(v, (*prefix, str(k)))} or {prefix}
    if isinstance(node, list) and node and all(isinstance(i, dict) and "name" in i for i in node):
        return {p for item in node for p in leaves(item, (*prefix, f"[name={item['name']}]"))}
    return {prefix}


def _merge(live: Any, patch: Any, key: str | None = None) -> Any:
    if isinstance(live, dict) and isinstance(patch, dict):
        out = dict(live)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = _merge(live.get(k), v, k)
        return out
    if isinstance(live, list) and isinstance(patch, list) and key in MERGE_KEYS:
        by = MERGE_KEYS[key]
        out_list = [copy.deepcopy(i) for i in live]
        for item in patch:
            at = next((i for i, old in enumerate(out_list) if old.get(by) == item.get(by)), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = _merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def _delete_dropped(live: Any, original: Any, modified: Any, key: str | None = None) -> Any:
    """What CreateThreeWayMergePatch deletes: in `original`, not in `modified`."""
    if isinstance(live, dict) and isinstance(original, dict):
        modified = modified if isinstance(modified, dict) else {}
        out = dict(live)
        for k, v in original.items():
            if k not in modified:
                out.pop(k, None)
            elif k in out:
                out[k] = _delete_dropped(out[k], v, modified[k], k)
        return out
    if isinstance(live, list) and isinstance(original, list) and key in MERGE_KEYS:
        by = MERGE_KEYS[key]
        kept = {i.get(by) for i in modified or []}
        dropped = {i.get(by) for i in original} - kept
        return [i for i in live if i.get(by) not in dropped]
    return live


def _without_annotation(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    annotations = doc.get("metadata", {}).get("annotations") or {}
    annotations.pop(LAST_APPLIED, None)
    return doc


def client_side_apply(live: Live | None, config: dict[str, Any], manager: str = "kubectl-client-side-apply") -> Live:
    config = _without_annotation(config)
    if live is None:
        obj = copy.deepcopy(config)
    else:
        original = json.loads(((live.obj.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED, "{}"))
        obj = _merge(_delete_dropped(live.obj, original, config), config)
    obj.setdefault("metadata", {}).setdefault("annotations", {})[LAST_APPLIED] = json.dumps(config, sort_keys=True)
    result = Live(obj, {} if live is None else copy.deepcopy(live.managers))
    _record_update(result, manager, config)
    return result


def strategic_patch(live: Live, patch: dict[str, Any], manager: str = "kubectl-patch") -> Live:
    result = Live(_merge(live.obj, patch), copy.deepcopy(live.managers))
    _record_update(result, manager, patch)
    return result


def _record_update(live: Live, manager: str, written: dict[str, Any]) -> None:
    paths = leaves(written) | (
        {("metadata", "annotations", LAST_APPLIED)} if manager.endswith("client-side-apply") else set()
    )
    for other, (op, owned) in live.managers.items():
        live.managers[other] = (op, owned - paths)
    _, mine = live.managers.get(manager, ("Update", set()))
    live.managers[manager] = ("Update", mine | paths)


def _remove(obj: dict[str, Any], path: Path) -> None:
    node: Any = obj
    for part in path[:-1]:
        if part.startswith("[name="):
            node = next(i for i in node if f"[name={i['name']}]" == part)
        else:
            node = node.get(part)
        if node is None:
            return
    last = path[-1]
    if isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list):
        node[:] = [i for i in node if f"[name={i['name']}]" != last]


def server_side_apply(live: Live, config: dict[str, Any], manager: str) -> Live:
    """The API server's Apply: set the config, then prune what `manager` applied before and no longer sends."""
    result = Live(_merge(live.obj, config), copy.deepcopy(live.managers))
    sent = leaves(config)
    _, before = result.managers.get(manager, ("Apply", set()))
    others = set().union(*(owned for m, (_, owned) in result.managers.items() if m != manager)) - sent
    for path in sorted(before - sent):
        if path not in others:
            _remove(result.obj, path)
    for other, (op, owned) in result.managers.items():
        result.managers[other] = (op, owned - sent) if op == "Update" else (op, owned)
    result.managers[manager] = ("Apply", sent)
    return result


def kubectl_server_side_apply(live: Live, config: dict[str, Any], manager: str) -> Live:
    """`kubectl apply --server-side --field-manager=MANAGER`: apply, migrate the client-side manager's fields, apply."""
    result = server_side_apply(live, config, manager)
    csa = [
        m
        for m, (op, owned) in result.managers.items()
        if op == "Update" and ("metadata", "annotations", LAST_APPLIED) in owned
    ]
    if not csa:
        return result
    _, mine = result.managers[manager]
    for m in csa:
        mine = mine | result.managers.pop(m)[1]
    result.managers[manager] = ("Apply", mine)
    return server_side_apply(result, config, manager)


# --- the upstream objects, as their releases' manifests create them ------------------------------------------

# knative/serving knative-v1.21.0 config/core/configmaps/features.yaml (labels as released; `_example` abridged).
KNATIVE_FEATURES = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "config-features",
        "namespace": "knative-serving",
        "labels": {
            "app.kubernetes.io/name": "knative-serving",
            "app.kubernetes.io/component": "controller",
            "app.kubernetes.io/version": "1.21.0",
        },
        "annotations": {"knative.dev/example-checksum": "63a13754"},
    },
    "data": {"_example": 'multi-container: "enabled"\n'},
}
# argoproj/argo-workflows v4.1.2 manifests/base/workflow-controller/workflow-controller-configmap.yaml: no data.
ARGO_CONTROLLER_CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "workflow-controller-configmap", "namespace": "argo"},
}
# argoproj/argo-events v1.9.11 manifests/base/controller-manager/controller-manager-deployment.yaml, with the image
# and ARGO_EVENTS_IMAGE its kustomization sets (manifests/base/kustomization.yaml).
ARGO_EVENTS_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "controller-manager", "namespace": "argo-events"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "controller-manager"}},
        "template": {
            "metadata": {"labels": {"app": "controller-manager"}},
            "spec": {
                "serviceAccountName": "argo-events-sa",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 9731},
                "containers": [
                    {
                        "name": "controller-manager",
                        "image": "quay.io/argoproj/argo-events:v1.9.11",
                        "imagePullPolicy": "Always",
                        "args": ["controller"],
                        "env": [
                            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "ARGO_EVENTS_IMAGE", "value": "quay.io/argoproj/argo-events:v1.9.11"},
                        ],
                        "volumeMounts": [{"mountPath": "/etc/argo-events", "name": "controller-config-volume"}],
                    }
                ],
                "volumes": [
                    {"name": "controller-config-volume", "configMap": {"name": "argo-events-controller-config"}}
                ],
            },
        },
    },
}


def argo_events_configmap(versions: list[dict[str, Any]]) -> dict[str, Any]:
    """argo-events v1.9.11 manifests/base/controller-manager/controller-config.yaml with these jetstream versions."""
    config = {"eventBus": {"nats": {"versions": [{"version": "0.22.1"}]}, "jetstream": {"versions": versions}}}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argo-events-controller-config", "namespace": "argo-events"},
        "data": {"controller-config.yaml": yaml.safe_dump(config)},
    }


UPSTREAM = {
    ("ConfigMap", "config-features"): KNATIVE_FEATURES,
    ("ConfigMap", "workflow-controller-configmap"): ARGO_CONTROLLER_CONFIGMAP,
    ("Deployment", "controller-manager"): ARGO_EVENTS_DEPLOYMENT,
}


def upstream_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    return UPSTREAM.get((doc.get("kind"), (doc.get("metadata") or {}).get("name")))  # type: ignore[arg-type]


def is_partial(doc: dict[str, Any]) -> bool:
    """A patch of a few fields of an upstream object (pipelines/platform/events_controller.py PARTIAL)."""
    from pipelines.platform.events_controller import PARTIAL

    return PARTIAL in ((doc.get("metadata") or {}).get("annotations") or {})


def applied_to_upstream(doc: dict[str, Any]) -> dict[str, Any]:
    """What the API server validates for a patch: the upstream object with it merged in; any other document as is."""
    base = upstream_of(doc) if is_partial(doc) else None
    return doc if base is None else strategic_patch(Live(copy.deepcopy(base)), doc).obj
