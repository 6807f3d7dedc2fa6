"""Strict validation of generated manifests: a typo such as `retrystrategy` is an error, not ignored.

- Argo kinds: round-trip through Hera's generated models (types), then walk the document beside
  those models and report every key that is not a field (Hera's models ignore unknown keys).
- PaddleJob (both operators): the upstream CRD's openAPIV3Schema (vendored in
  `tests/schemas/`, pod templates pruned) with unknown keys forbidden, and each replica's
  pod template as a Pod through kubernetes-validate in strict mode.
- Kubeflow Trainer v2 and Kueue kinds: the upstream CRDs' storage-version schemas vendored by
  scripts/vendor_crd_schemas.py (full pod templates pruned, checked as Pods instead), unknown keys
  forbidden. CEL rules (x-kubernetes-validations) are not evaluated here.
- Event, monitoring and policy custom resources: `validate_crds`.
- Kubernetes core kinds: kubernetes-validate in strict mode.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from hera.workflows import models as hera_models
from pydantic import BaseModel, RootModel, ValidationError

from paddle_mlops_core.contracts import TRAINING_JOB_ENV
from pipelines.train_step import placed_manifest
from tests.kubectl_apply_model import applied_to_upstream
from tests.validate_crds import validate_crd

KUBERNETES_VERSION = "1.30.0"
SCHEMAS = Path(__file__).parent / "schemas"
ARGO_KINDS: dict[str, type[BaseModel]] = {
    "WorkflowTemplate": hera_models.WorkflowTemplate,
    "ClusterWorkflowTemplate": hera_models.ClusterWorkflowTemplate,
    "CronWorkflow": hera_models.CronWorkflow,
    "Workflow": hera_models.Workflow,
}
PADDLEJOB_SCHEMAS = {
    "kubeflow.org/v1": "paddlejob-kubeflow.org-v1.json",
    "batch.paddlepaddle.org/v1": "paddlejob-batch.paddlepaddle.org-v1.json",
}


def validate_document(doc: dict[str, Any], where: str = "document") -> list[str]:
    """Every problem found in one manifest, each naming where it is; empty when valid (a patch of an upstream object
    is validated as the object it patches, with the patch in)."""
    doc = applied_to_upstream(doc)
    api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    if api_version.startswith("argoproj.io/") and kind in ARGO_KINDS:
        return _validate_argo(doc, ARGO_KINDS[kind], where)
    if kind == "PaddleJob" and api_version in PADDLEJOB_SCHEMAS:
        return validate_paddlejob(doc, where)
    if (api_version, kind) in vendored_crds():
        return validate_vendored(doc, where)
    crd_problems = validate_crd(doc, where)
    if crd_problems is not None:
        return crd_problems
    return _validate_kubernetes(doc, where)


def validate_documents(files: dict[str, list[dict[str, Any]]]) -> list[str]:
    """All problems across `{file name: documents}` (the shape `compile.render_all` returns)."""
    problems = []
    for name, docs in files.items():
        for i, doc in enumerate(docs):
            problems += validate_document(doc, f"{name}[{i}] {doc.get('kind', '?')}/{_name(doc)}")
    return problems


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return meta.get("name") or meta.get("generateName") or "?"


def _validate_argo(doc: dict[str, Any], model: type[BaseModel], where: str) -> list[str]:
    try:
        model.model_validate(doc)
    except ValidationError as exc:
        return [f"{where}: {_loc(err['loc'])}: {err['msg']}" for err in exc.errors()]
    problems = [f"{where}: {path}" for path in unknown_keys(doc, model)]
    for i, template in enumerate((doc.get("spec") or {}).get("templates") or []):
        manifest = (template.get("resource") or {}).get("manifest")
        if manifest:
            inner = yaml.safe_load(manifest)
            problems += validate_document(inner, f"{where}: spec.templates[{i}].resource.manifest")
        placed = placed_manifest(template)  # the training job a train step places (pipelines/train_step.py)
        if placed is not None:
            problems += validate_document(placed, f"{where}: spec.templates[{i}].container.env[{TRAINING_JOB_ENV}]")
    return problems


def _loc(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(top level)"


def unknown_keys(data: Any, annotation: Any, path: str = "") -> list[str]:
    """Paths of keys in `data` that the model `annotation` has no field for, recursively."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return unknown_keys(data, typing.get_args(annotation)[0], path)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        results = [unknown_keys(data, option, path) for option in options if _shape_fits(data, option)]
        return min(results, key=len) if results else []
    if origin in (list, tuple, typing.List) and isinstance(data, list):  # noqa: UP006
        (item,) = typing.get_args(annotation)[:1] or (Any,)
        return [p for i, value in enumerate(data) for p in unknown_keys(value, item, f"{path}[{i}]")]
    if origin in (dict, typing.Dict) and isinstance(data, dict):  # noqa: UP006
        value_type = typing.get_args(annotation)[1] if typing.get_args(annotation) else Any
        return [p for key, value in data.items() for p in unknown_keys(value, value_type, f"{path}.{key}")]
    if isinstance(annotation, type) and issubclass(annotation, RootModel):
        return unknown_keys(data, annotation.model_fields["root"].annotation, path)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(data, dict):
        fields = {(f.alias or name): f for name, f in annotation.model_fields.items()}
        problems = []
        for key, value in data.items():
            where = f"{path}.{key}" if path else key
            if key not in fields:
                allowed = ", ".join(sorted(fields))
                problems.append(f"unknown field '{where}' (allowed here: {allowed})")
            else:
                problems += unknown_keys(value, fields[key].annotation, where)
        return problems
    return []


def _shape_fits(data: Any, annotation: Any) -> bool:
    """Whether `data` could be an instance of `annotation` by its JSON shape alone."""
    origin = typing.get_origin(annotation) or annotation
    if origin is typing.Annotated:
        return _shape_fits(data, typing.get_args(annotation)[0])
    if isinstance(origin, type) and issubclass(origin, RootModel):
        return _shape_fits(data, origin.model_fields["root"].annotation)
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        return isinstance(data, dict)
    if origin in (list, tuple):
        return isinstance(data, list)
    if origin is dict:
        return isinstance(data, dict)
    return not isinstance(data, (dict, list))


@cache
def _paddlejob_validator(api_version: str) -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMAS / PADDLEJOB_SCHEMAS[api_version]).read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(_forbid_unknown(schema))


def _forbid_unknown(schema: Any) -> Any:
    """Every object schema that lists its properties rejects keys it does not list."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


def validate_paddlejob(doc: dict[str, Any], where: str) -> list[str]:
    """CRD schema for the job, kubernetes-validate for every replica's pod template."""
    return _schema_and_pods(_paddlejob_validator(doc["apiVersion"]), doc, where)


def _schema_and_pods(validator: jsonschema.Draft7Validator, doc: dict[str, Any], where: str) -> list[str]:
    """The document against its strict schema, and each pod template in it as a Pod."""
    problems = [
        f"{where}: {_loc(tuple(err.absolute_path))}: {err.message}"
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
    for path, template in pod_templates(doc):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "replica", **(template.get("metadata") or {})},
            "spec": template.get("spec") or {},
        }
        problems += _validate_kubernetes(pod, f"{where}: {path} (as a Pod)")
    return problems


@cache
def vendored_crds() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    """(apiVersion, kind) → strict validator, for every schema scripts/vendor_crd_schemas.py wrote."""
    out = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "schema" in data and "kind" in data:
            schema = _python_patterns(_forbid_unknown(data["schema"]))
            out[(data["apiVersion"], data["kind"])] = jsonschema.Draft7Validator(schema)
    return out


def _python_patterns(node: Any) -> Any:
    """Go's RE2 allows inline flags mid-pattern (`^(?i)[a-z]...`, Kueue's kind names); Python wants them first."""
    if isinstance(node, dict):
        out = {k: _python_patterns(v) for k, v in node.items()}
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            out["pattern"] = "(?i)^" + pattern[len("^(?i)") :]
        return out
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


def validate_vendored(doc: dict[str, Any], where: str) -> list[str]:
    return _schema_and_pods(vendored_crds()[(doc["apiVersion"], doc["kind"])], doc, where)


def pod_templates(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path, pod template) for each replica of a PaddleJob of either operator, each replicated job
    of a ClusterTrainingRuntime."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "ClusterTrainingRuntime":
        jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        return [
            (f"spec.template.spec.replicatedJobs[{i}].template.spec.template", (job["template"].get("spec") or {})
             .get("template") or {})
            for i, job in enumerate(jobs)
        ]  # fmt: skip
    if doc.get("kind") != "PaddleJob":
        return []
    if doc.get("apiVersion") == "kubeflow.org/v1":
        replicas = spec.get("paddleReplicaSpecs") or {}
        return [(f"spec.paddleReplicaSpecs.{name}.template", r.get("template") or {}) for name, r in replicas.items()]
    return [
        (f"spec.{role}.template", spec[role].get("template") or {})
        for role in ("ps", "worker", "heter")
        if isinstance(spec.get(role), dict)
    ]


def _validate_kubernetes(doc: dict[str, Any], where: str) -> list[str]:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        # kubernetes-validate copies the jsonschema error's attributes onto its own.
        return [f"{where}: {_loc(tuple(exc.absolute_path))}: {exc.message}"]
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
        return [
            f"{where}: no Kubernetes {KUBERNETES_VERSION} schema for {doc.get('apiVersion')}/{doc.get('kind')}: {exc}"
        ]
    return []
