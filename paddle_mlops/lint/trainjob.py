"""The pods of a Kubeflow Trainer v2 TrainJob, as the Trainer controller builds them.

A TrainJob's pods are its ClusterTrainingRuntime's pod template with the TrainJob's `trainer`
block applied to the container named `node` of the replicated job labelled as the trainer ancestor
(trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go Trainer(): image, command and args
replaced, env upserted, resourcesPerNode as the resources) and its `runtimePatches` merged in
(pkg/runtime/core/trainingruntime.go, strategic merge: containers by name, the rest replaced).
So linting a TrainJob needs its runtime: `runtimes_in` collects those among the linted files.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"


def runtimes_in(docs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """ClusterTrainingRuntime name → document."""
    return {
        (d.get("metadata") or {}).get("name", ""): d
        for d in docs
        if d.get("kind") == "ClusterTrainingRuntime"
        and str(d.get("apiVersion", "")).startswith("trainer.kubeflow.org/")
    }


def replicated_jobs(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    return (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs") or []


def pod_template(job: dict[str, Any]) -> dict[str, Any]:
    return ((job.get("template") or {}).get("spec") or {}).get("template") or {}


def _upsert(items: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`items` with each entry of `new` in place of the one of the same name (a strategic merge on `name`)."""
    names = {item.get("name") for item in new}
    return [i for i in items if i.get("name") not in names] + list(new)


def _merge_containers(base: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(c) for c in base]
    for p in patch:
        target = next((c for c in out if c.get("name") == p.get("name")), None)
        if target is None:
            out.append(dict(p))
            continue
        for key, value in p.items():
            if key in ("env", "volumeMounts") and isinstance(value, list):
                target[key] = _upsert(target.get(key, []), value)
            elif key != "name":
                target[key] = value
    return out


def _apply_patch(template: dict[str, Any], patch: dict[str, Any]) -> None:
    meta = patch.get("metadata") or {}
    for key in ("labels", "annotations"):
        if meta.get(key):
            template.setdefault("metadata", {}).setdefault(key, {}).update(meta[key])
    spec = template.setdefault("spec", {})
    for key, value in (patch.get("spec") or {}).items():
        if key in ("containers", "initContainers"):
            spec[key] = _merge_containers(spec.get(key, []), value)
        elif key == "volumes":
            spec[key] = _upsert(spec.get(key, []), value)
        else:
            spec[key] = value


def trainjob_pod_templates(doc: dict[str, Any], runtime: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(replicated job name, the pod template its pods get) for a TrainJob on `runtime`."""
    spec = doc.get("spec") or {}
    trainer = spec.get("trainer") or {}
    patches = {
        job.get("name"): pod_template(job)
        for entry in spec.get("runtimePatches") or []
        for job in replicated_jobs({"spec": entry.get("trainingRuntimeSpec") or {}})
    }
    out = []
    for job in replicated_jobs(runtime):
        template = copy.deepcopy(pod_template(job))
        labels = (job.get("template") or {}).get("metadata", {}).get("labels") or {}
        if labels.get(ANCESTOR_LABEL) == "trainer":
            for container in (template.get("spec") or {}).get("containers") or []:
                if container.get("name") != NODE:
                    continue
                for key in ("image", "command", "args"):
                    if trainer.get(key) is not None:
                        container[key] = trainer[key]
                if trainer.get("env"):
                    container["env"] = _upsert(container.get("env", []), trainer["env"])
                if trainer.get("resourcesPerNode") is not None:
                    container["resources"] = trainer["resourcesPerNode"]
        if job.get("name") in patches:
            _apply_patch(template, patches[job["name"]])
        out.append((str(job.get("name")), template))
    return out
