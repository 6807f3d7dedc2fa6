"""An Argo Events Sensor evaluated here: what the local run does with the notification it makes.

On the cluster Argo Events' sensor filters an event and fills in the Workflow its trigger submits; the local run
(and `paddle-mlops publish`) hands the same event to the same generated Sensor document and gets the same
Workflow parameters back, so a filter or parameter change is exercised by every local run. Mirrored from
argo-events v1.9.11 (tests/test_events.py and tests/test_upstream_argo_events.py check it against the
generated documents):

- data filters (pkg/sensors/dependencies/filter.go filterData): a gjson path into the event data; a missing
  path fails the filter; string values are regular expressions matched unanchored; `=` (default) passes when
  any value matches, `!=` when any value does not; bool and number values are parsed and compared; filters
  are AND-ed unless `dataLogicalOperator: or`. `exprs` and `script` filters are refused (not mirrored);
- trigger parameters (pkg/sensors/triggers/params.go ResolveParamValue): `src.dataTemplate` (only the sprig
  `trimPrefix` form the generated Sensors use) falling back to `src.dataKey` (gjson), written to `dest`
  (sjson dotted path).
"""

from __future__ import annotations

import copy
import re
from typing import Any


class SensorError(Exception):
    """The Sensor uses something this mirror does not evaluate."""


def gjson_get(data: Any, path: str) -> tuple[bool, Any]:
    """Dotted path with numeric array indexes and `\\.` escapes (the gjson subset the Sensors use)."""
    keys = [k.replace("\x00", ".") for k in path.replace("\\.", "\x00").split(".")]
    current = data
    for key in keys:
        if isinstance(current, dict) and key in current:
            current = current[key]
        elif isinstance(current, list) and key.isdigit() and int(key) < len(current):
            current = current[int(key)]
        else:
            return False, None
    return True, current


def sjson_set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    current: Any = doc
    for key in keys[:-1]:
        current = current[int(key)] if isinstance(current, list) else current.setdefault(key, {})
    last = keys[-1]
    if isinstance(current, list):
        current[int(last)] = value
    else:
        current[last] = value


_TRIM_PREFIX = re.compile(r'^\{\{ trimPrefix "([^"]*)" \.Input\.([\w.]+) \}\}$')


def param_value(src: dict[str, Any], data: dict[str, Any]) -> Any:
    """ResolveParamValue: the template first (falling back to the key when it yields nothing), then the key."""
    if "dataTemplate" in src:
        match = _TRIM_PREFIX.match(src["dataTemplate"])
        if not match:
            raise SensorError(f"dataTemplate not mirrored: {src['dataTemplate']!r}")
        exists, value = gjson_get(data, match.group(2))
        if exists and value not in (None, "") and str(value).removeprefix(match.group(1)):
            return str(value).removeprefix(match.group(1))
    if "dataKey" not in src:
        raise SensorError(f"trigger parameter {src} resolves to nothing")
    exists, value = gjson_get(data, src["dataKey"])
    if not exists:
        if "value" in src:
            return src["value"]  # the parameter's default
        raise SensorError(f"{src['dataKey']} is missing from the event")
    return value


_NUMBER_OPS = {
    "=": float.__eq__,
    "!=": float.__ne__,
    ">": float.__gt__,
    ">=": float.__ge__,
    "<": float.__lt__,
    "<=": float.__le__,
}


def _one_value_passes(kind: str, comparator: str, expected: str, value: Any) -> bool:
    if kind == "string":
        return (re.search(expected, str(value)) is not None) == (comparator == "=")
    if kind == "bool":
        return (bool(value) == (expected.lower() == "true")) == (comparator == "=")
    if kind == "number":
        return _NUMBER_OPS[comparator](float(value), float(expected))
    raise SensorError(f"data filter type {kind!r} is not mirrored")


def data_filter_passes(flt: dict[str, Any], data: dict[str, Any]) -> bool:
    exists, value = gjson_get(data, flt["path"])
    if not exists or value is None:
        return False
    comparator = flt.get("comparator", "=") or "="
    return any(_one_value_passes(flt["type"], comparator, expected, value) for expected in flt["value"])


def dependency_passes(dep: dict[str, Any], data: dict[str, Any]) -> bool:
    filters = dep.get("filters", {})
    unsupported = set(filters) - {"data", "dataLogicalOperator"}
    if unsupported:
        raise SensorError(f"filters not mirrored: {sorted(unsupported)}")
    results = [data_filter_passes(f, data) for f in filters.get("data", [])]
    return any(results) if filters.get("dataLogicalOperator") == "or" else all(results)


def fire(sensor: dict[str, Any], source: str, data: dict[str, Any], event: str | None = None) -> list[dict[str, Any]]:
    """The resources the Sensor's triggers would create for one event of `source` (and `event`, if given)."""
    fired = {
        d["name"]
        for d in sensor["spec"]["dependencies"]
        if d["eventSourceName"] == source and (event is None or d["eventName"] == event) and dependency_passes(d, data)
    }
    created = []
    for trigger in sensor["spec"]["triggers"]:
        template = trigger["template"]
        if template["conditions"] not in fired:
            continue
        kind = "argoWorkflow" if "argoWorkflow" in template else "k8s"
        action = template[kind]
        resource = copy.deepcopy(action["source"]["resource"])
        for param in action.get("parameters", []):
            sjson_set(resource, param["dest"], param_value(param["src"], data))
        created.append(resource)
    return created


def workflow_parameters(workflow: dict[str, Any]) -> dict[str, str]:
    """name -> value of a created Workflow's `spec.arguments.parameters`."""
    params = ((workflow.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    return {p["name"]: str(p.get("value", "")) for p in params}
