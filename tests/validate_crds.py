"""Structural checks for the custom resources that kubernetes-validate has no schema for.

Each check rejects unknown keys, the way the Argo and PaddleJob checks in `validate_manifests.py` do:
- Argo Events (EventSource, Sensor, EventBus): a vendored subset of the upstream JSON schema.
- Prometheus operator (PrometheusRule, PodMonitor, ServiceMonitor): strict JSON schemas of the
  fields this project uses.
- Kyverno (ClusterPolicy/Policy): the allowed keys of spec, rules and verifyImages.
"""

from __future__ import annotations

from typing import Any

import jsonschema

# Vendored subset of Argo Events' JSON schema (io.argoproj.events.v1alpha1.<name>): per definition the
# keys it allows, the keys holding another vendored definition ("*Name": a map of them), and its
# required keys.
ARGO_EVENTS_SUBSET: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {
    "EventSourceSpec": (
        "amqp azureEventsHub azureQueueStorage azureServiceBus bitbucket bitbucketserver calendar emitter "
        "eventBusName file generic gerrit github gitlab hdfs kafka minio mns mqtt nats nsq pubSub pulsar redis "
        "redisStream replicas resource service sftp slack sns sqs storageGrid stripe template webhook",
        {
            "github": "*GithubEventSource",
            "minio": "*S3Artifact",
            "service": "Service",
            "template": "Template",
            "webhook": "*WebhookEventSource",
        },
        (),
    ),
    "SensorSpec": (
        "dependencies errorOnFailedRound eventBusName loggingFields replicas revisionHistoryLimit template triggers",
        {"dependencies": "EventDependency", "template": "Template", "triggers": "Trigger"},
        ("dependencies", "triggers"),
    ),
    "EventBusSpec": (
        "jetstream jetstreamExotic kafka nats",
        {"jetstream": "JetStreamBus"},
        (),
    ),
    "JetStreamBus": (
        "affinity containerTemplate imagePullSecrets maxPayload metadata metricsContainerTemplate nodeSelector "
        "persistence priority priorityClassName reloaderContainerTemplate replicas securityContext "
        "serviceAccountName settings startArgs streamConfig tolerations version",
        {
            "containerTemplate": "ContainerTemplate",
            "metricsContainerTemplate": "ContainerTemplate",
            "persistence": "PersistenceStrategy",
            "reloaderContainerTemplate": "ContainerTemplate",
        },
        (),
    ),
    "ContainerTemplate": (
        "imagePullPolicy resources securityContext",
        {},
        (),
    ),
    "PersistenceStrategy": (
        "accessMode storageClassName volumeSize",
        {},
        (),
    ),
    "Template": (
        "affinity container imagePullSecrets metadata nodeSelector priority priorityClassName securityContext "
        "serviceAccountName tolerations volumes",
        {"container": "Container"},
        (),
    ),
    "Container": (
        "env envFrom imagePullPolicy resources securityContext volumeMounts",
        {},
        (),
    ),
    "Service": (
        "clusterIP metadata ports",
        {},
        (),
    ),
    "GithubEventSource": (
        "active apiToken contentType deleteHookOnFinish events filter githubApp githubBaseURL githubUploadURL id "
        "insecure metadata organizations owner repositories repository webhook webhookSecret",
        {"repositories": "OwnedRepositories"},
        ("events",),
    ),
    "OwnedRepositories": (
        "names owner",
        {},
        (),
    ),
    "WebhookEventSource": (
        "authSecret endpoint filter maxPayloadSize metadata method port serverCertSecret serverKeySecret url",
        {},
        ("endpoint", "method", "port", "url"),
    ),
    "S3Artifact": (
        "accessKey bucket caCertificate endpoint events filter insecure metadata region secretKey",
        {
            "accessKey": "SecretKeySelector",
            "bucket": "S3Bucket",
            "caCertificate": "SecretKeySelector",
            "filter": "S3Filter",
            "secretKey": "SecretKeySelector",
        },
        ("endpoint", "bucket", "accessKey", "secretKey"),
    ),
    "S3Bucket": (
        "key name",
        {},
        ("name",),
    ),
    "S3Filter": (
        "prefix suffix",
        {},
        ("prefix", "suffix"),
    ),
    "SecretKeySelector": (
        "key name optional",
        {},
        ("key",),
    ),
    "EventDependency": (
        "eventName eventSourceName filters filtersLogicalOperator name transform",
        {"filters": "EventDependencyFilter"},
        ("name", "eventSourceName", "eventName"),
    ),
    "EventDependencyFilter": (
        "context data dataLogicalOperator exprLogicalOperator exprs script time",
        {"data": "DataFilter"},
        (),
    ),
    "DataFilter": (
        "comparator path template type value",
        {},
        ("path", "type", "value"),
    ),
    "Trigger": (
        "atLeastOnce dlqTrigger parameters policy rateLimit retryStrategy template",
        {
            "dlqTrigger": "Trigger",
            "parameters": "TriggerParameter",
            "retryStrategy": "Backoff",
            "template": "TriggerTemplate",
        },
        (),
    ),
    "TriggerTemplate": (
        "argoWorkflow awsLambda azureEventHubs azureServiceBus conditions conditionsReset custom email http k8s "
        "kafka log name nats openWhisk pulsar slack",
        {"argoWorkflow": "ArgoWorkflowTrigger", "k8s": "StandardK8STrigger"},
        ("name",),
    ),
    "ArgoWorkflowTrigger": (
        "args operation parameters source",
        {"parameters": "TriggerParameter", "source": "ArtifactLocation"},
        (),
    ),
    "StandardK8STrigger": (
        "liveObject operation parameters patchStrategy source",
        {"parameters": "TriggerParameter", "source": "ArtifactLocation"},
        (),
    ),
    "TriggerParameter": (
        "dest operation src",
        {"src": "TriggerParameterSource"},
        ("dest",),
    ),
    "TriggerParameterSource": (
        "contextKey contextTemplate dataKey dataTemplate dependencyName useRawData value",
        {},
        ("dependencyName",),
    ),
    "Backoff": (
        "duration factor jitter steps",
        {},
        (),
    ),
    "ArtifactLocation": (
        "configmap file git inline resource s3 url",
        {},
        (),
    ),
}

ARGO_EVENTS_SPECS = {"EventBus": "EventBusSpec", "EventSource": "EventSourceSpec", "Sensor": "SensorSpec"}


def walk_argo_events(value: Any, definition: str, where: str, problems: list[str]) -> None:
    is_map = definition.startswith("*")
    definition = definition.lstrip("*")
    if is_map:
        for key, item in value.items():
            walk_argo_events(item, definition, f"{where}.{key}", problems)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            walk_argo_events(item, definition, f"{where}[{i}]", problems)
        return
    keys, refs, required = ARGO_EVENTS_SUBSET[definition]
    allowed = set(keys.split())
    problems += [f"{where}: missing required key {r!r}" for r in required if r not in value]
    for key, item in value.items():
        if key not in allowed:
            problems.append(f"{where}.{key}: not a field of {definition}")
        elif key in refs:
            walk_argo_events(item, refs[key], f"{where}.{key}", problems)


_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {"type": "string"},
        "regex": {"type": "string"},
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "targetLabel": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
        "modulus": {"type": "integer"},
    },
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "port": {"type": "string"},
        "targetPort": {"type": ["string", "integer"]},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
        "scrapeTimeout": {"type": "string"},
        "honorLabels": {"type": "boolean"},
        "tlsConfig": {
            "type": "object",
            "properties": {"insecureSkipVerify": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "relabelings": {"type": "array", "items": _RELABEL},
        "metricRelabelings": {"type": "array", "items": _RELABEL},
    },
}


def _monitor_spec(endpoints_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["selector", endpoints_key],
        "properties": {
            "selector": _SELECTOR,
            "namespaceSelector": _NAMESPACE_SELECTOR,
            "jobLabel": {"type": "string"},
            "podTargetLabels": {"type": "array", "items": {"type": "string"}},
            endpoints_key: {"type": "array", "minItems": 1, "items": _ENDPOINT},
        },
    }


KYVERNO_SPEC_KEYS = {
    "admission", "background", "failurePolicy", "rules", "schemaValidation", "validationFailureAction",
    "validationFailureActionOverrides", "webhookConfiguration", "webhookTimeoutSeconds", "mutateExistingOnPolicyUpdate",
    "generateExisting", "useServerSideApply", "emitWarning",
}  # fmt: skip
KYVERNO_RULE_KEYS = {
    "name", "match", "exclude", "context", "preconditions", "validate", "mutate", "generate", "verifyImages",
    "imageExtractors", "celPreconditions", "skipBackgroundRequests",
}  # fmt: skip
KYVERNO_VERIFY_KEYS = {
    "imageReferences", "skipImageReferences", "attestors", "attestations", "mutateDigest", "verifyDigest", "required",
    "repository", "type", "useCache", "imageRegistryCredentials", "validate",
}  # fmt: skip


def _kyverno(doc: dict[str, Any], where: str) -> list[str]:
    spec = doc.get("spec") or {}
    problems = [f"{where}.spec.{k}: not a field of a Kyverno policy spec" for k in spec if k not in KYVERNO_SPEC_KEYS]
    if not spec.get("rules"):
        problems.append(f"{where}.spec.rules: a policy needs at least one rule")
    for i, rule in enumerate(spec.get("rules") or []):
        at = f"{where}.spec.rules[{i}]"
        problems += [f"{at}.{k}: not a field of a Kyverno rule" for k in rule if k not in KYVERNO_RULE_KEYS]
        if "name" not in rule or "match" not in rule:
            problems.append(f"{at}: a rule needs 'name' and 'match'")
        for j, verify in enumerate(rule.get("verifyImages") or []):
            problems += [
                f"{at}.verifyImages[{j}].{k}: not a field of verifyImages"
                for k in verify
                if k not in KYVERNO_VERIFY_KEYS
            ]
    return problems


def _schema_problems(schema: dict[str, Any], spec: Any, where: str) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{where}.spec{''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in err.absolute_path)}: {err.message}"
        for err in validator.iter_errors(spec)
    ]


def validate_crd(doc: dict[str, Any], where: str) -> list[str] | None:
    """Problems for a custom resource this module knows; None when it does not know the kind."""
    api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    if api_version == "argoproj.io/v1alpha1" and kind in ARGO_EVENTS_SPECS:
        problems: list[str] = []
        walk_argo_events(doc.get("spec") or {}, ARGO_EVENTS_SPECS[kind], f"{where}.spec", problems)
        return problems
    if api_version == "monitoring.coreos.com/v1":
        from tests.prometheus_rule_schema import PROMETHEUS_RULE_SPEC_SCHEMA

        schemas = {
            "PrometheusRule": PROMETHEUS_RULE_SPEC_SCHEMA,
            "PodMonitor": _monitor_spec("podMetricsEndpoints"),
            "ServiceMonitor": _monitor_spec("endpoints"),
        }
        if kind in schemas:
            return _schema_problems(schemas[kind], doc.get("spec"), where)
    if api_version == "kyverno.io/v1" and kind in ("ClusterPolicy", "Policy"):
        return _kyverno(doc, where)
    return None
