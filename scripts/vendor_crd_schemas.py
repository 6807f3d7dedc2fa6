"""Vendor the upstream CRD schemas the manifest tests validate against into tests/schemas/.

`python scripts/vendor_crd_schemas.py ../shared/schemas` reads the Kubeflow Trainer v2 and Kueue
CustomResourceDefinitions, keeps each kind's storage version's openAPIV3Schema without
descriptions, and prunes every full pod template to `{type: object}` (tests validate pod templates as
Pods with kubernetes-validate instead, which knows the full PodSpec). tests/test_vendored_schemas.py
checks the vendored files equal this transformation of the upstream CRDs where a checkout has them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

CRDS = {
    **{
        f"crd-trainer.kubeflow.org_{plural}.yaml": f"{plural[:-1]}-trainer.kubeflow.org-v1alpha1.json"
        for plural in ("trainjobs", "clustertrainingruntimes")
    },
    **{
        f"crd-kueue.x-k8s.io_{plural}.yaml": f"{plural[:-1]}-kueue.x-k8s.io-v1beta2.json"
        for plural in (
            "resourceflavors",
            "clusterqueues",
            "localqueues",
            "cohorts",
            "workloadpriorityclasses",
            "topologies",
            "admissionchecks",
            "multikueueconfigs",
            "multikueueclusters",
        )
    },
}
POD_TEMPLATE = {"type": "object", "x-paddle-mlops-pod-template": True}


def is_pod_template(node: dict[str, Any]) -> bool:
    """A full PodTemplateSpec (not the TrainJob's PodSpecPatch, which has no restartPolicy and stays)."""
    spec = (node.get("properties") or {}).get("spec") or {}
    fields = spec.get("properties") or {}
    return "containers" in fields and "restartPolicy" in fields


def prune(node: Any, field_names: bool = False) -> Any:
    """Drop the `description` keyword (not a field called description: `field_names` marks the
    mapping under `properties`) and replace full pod templates."""
    if isinstance(node, dict):
        if field_names:
            return {k: prune(v) for k, v in node.items()}
        if is_pod_template(node):
            return dict(POD_TEMPLATE)
        return {k: prune(v, k == "properties") for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [prune(v) for v in node]
    return node


def vendored(crd_text: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(crd_text) if d]
    (crd,) = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return {
        "apiVersion": f"{crd['spec']['group']}/{version['name']}",
        "kind": crd["spec"]["names"]["kind"],
        "schema": prune(version["schema"]["openAPIV3Schema"]),
    }


def main(source: str) -> int:
    out = Path(__file__).resolve().parents[1] / "tests" / "schemas"
    for crd_file, name in CRDS.items():
        data = vendored((Path(source) / crd_file).read_text(encoding="utf-8"))
        (out / name).write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "../shared/schemas"))
