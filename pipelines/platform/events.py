"""Argo Events: a git push becomes a `train-deploy` Workflow; a published model becomes a `rollout` Workflow.

EventSources receive the forge's webhook (GitHub: HMAC-signed; Gitea: bearer token), the Sensor
filters pushes (configured branches, no bot pushers, no `[skip ci]`, no branch deletions) and
submits a Workflow from the `train-deploy` WorkflowTemplate with named parameters taken from the
payload. The trigger is at-least-once: retried with backoff, then a dead-letter ConfigMap keeps
the payload so nothing is lost silently. Written for Argo Events 1.9.10+ (paddle_mlops_core/versions.py);
tests/test_upstream_argo_events.py encodes the controller code this relies on. Branches, bot
accounts, repositories and the webhook URL come from the `trigger` section of the configuration.
"""

from __future__ import annotations

import re
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PART_OF
from pipelines.platform.events_controller import PINNED_JETSTREAM_VERSION
from pipelines.platform.meta import metadata, restricted_container_security_context, restricted_pod_security_context

API_VERSION = "argoproj.io/v1alpha1"
SKIP_MARKERS: tuple[str, ...] = ("[skip ci]", "[ci skip]")

EVENT_BUS = "default"
# EventBus `jetstream.version` is looked up by exact string in the controller's version list
# (argo-events pkg/reconciler/config.go GetJetStreamVersion). Ours is an entry the install's controller
# settings add (events_controller.py), upstream's 2.10.29 images pinned by digest in a release: a version
# upstream lists ("2.10.29", "latest") would run its NATS images by tag.
JETSTREAM_VERSION = PINNED_JETSTREAM_VERSION
GITHUB_SOURCE = "github"
GITEA_SOURCE = "gitea"
SENSOR = "train-deploy-on-push"
WORKFLOW_TEMPLATE = "train-deploy"
EVENTSOURCE_SERVICE_ACCOUNT = "paddle-mlops-eventsource"
SENSOR_SERVICE_ACCOUNT = "paddle-mlops-sensor"
# The EventBus's NATS pods call no Kubernetes API: an account of their own without a token (the bus's pods otherwise
# run as the namespace's default account, token mounted; argo-events installer/jetstream.go serviceAccountName).
EVENTBUS_SERVICE_ACCOUNT = "paddle-mlops-eventbus"
GITHUB_SECRET = {"name": "github-webhook-secret", "key": "secret"}
GITEA_TOKEN = {"name": "gitea-webhook-token", "key": "token"}
GITHUB_PORT = 12000
GITEA_PORT = 12001

# The Workflow's parameters, in the order of `spec.arguments.parameters`; each trigger parameter
# writes `spec.arguments.parameters.<index>.value`, so this order is the contract.
WORKFLOW_PARAMETERS: tuple[str, ...] = ("git-sha", "git-repo", "git-branch", "pusher")
# Where each parameter comes from in the forge's push payload (gjson paths into the event data).
# `git-branch` is passed as the short name (`main`, like the template default and the CronWorkflow),
# not as the payload's `refs/heads/main`: BRANCH_TEMPLATE strips the prefix (see _source).
PAYLOAD_KEYS: dict[str, dict[str, str]] = {
    GITHUB_SOURCE: {
        "git-sha": "body.after",
        "git-repo": "body.repository.clone_url",
        "git-branch": "body.ref",
        "pusher": "body.pusher.name",
    },
    # Gitea's push payload follows GitHub's, except that the pusher is a user object (`login`).
    GITEA_SOURCE: {
        "git-sha": "body.after",
        "git-repo": "body.repository.clone_url",
        "git-branch": "body.ref",
        "pusher": "body.pusher.login",
    },
}

GITHUB_CHECK = (
    "The github EventSource has webhookSecret set, so it verifies the X-Hub-Signature-256 header "
    "(HMAC-SHA256 of the raw body with that secret, constant-time compare) and rejects the "
    "delivery before any event reaches the bus."
)
GITEA_CHECK = (
    "The generic webhook EventSource has no HMAC check, and Sensor filters (data, expr-lang, Lua) "
    "cannot compute one, so X-Gitea-Signature is NOT verified. Instead authSecret makes the "
    "EventSource reject any request whose 'Authorization: Bearer <token>' header does not equal "
    "the token in Secret gitea-webhook-token (set it as the webhook's Authorization header in "
    "Gitea). For GitLab use Argo Events' gitlab EventSource (secretToken checks X-Gitlab-Token)."
)


def regex_literal(text: str) -> str:
    """`text` as an RE2 literal (Argo Events compiles data-filter values with Go's regexp)."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)


def _any_of(items: tuple[str, ...]) -> str:
    return "^(" + "|".join(regex_literal(i) for i in items) + ")$"


def pod_template(service_account: str) -> dict[str, Any]:
    """Restricted pod for the controller-made EventSource/Sensor deployments (image is the controller's)."""
    return {
        "serviceAccountName": service_account,
        "securityContext": restricted_pod_security_context(),
        "container": {
            "securityContext": restricted_container_security_context(),
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "256Mi"},
            },
            # The root filesystem is read-only; the sensor's Argo trigger writes the Workflow to a
            # temporary file before `argo submit`.
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        },
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }


def event_bus(cfg: PipelineConfig) -> dict[str, Any]:
    """JetStream bus: the at-least-once trigger semantics need a persistent bus."""
    pod = restricted_pod_security_context()
    container = {"securityContext": restricted_container_security_context()}
    return {
        "apiVersion": API_VERSION,
        "kind": "EventBus",
        "metadata": metadata(EVENT_BUS, cfg.cluster.namespace),
        "spec": {
            "jetstream": {
                # A key of the controller's version list (see JETSTREAM_VERSION), not an image tag.
                "version": JETSTREAM_VERSION,
                "replicas": 3,
                "serviceAccountName": EVENTBUS_SERVICE_ACCOUNT,
                "persistence": {"accessMode": "ReadWriteOnce", "volumeSize": "10Gi"},
                "securityContext": pod,
                "containerTemplate": {
                    **container,
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                },
                "reloaderContainerTemplate": {
                    **container,
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi"},
                        "limits": {"cpu": "100m", "memory": "64Mi"},
                    },
                },
                "metricsContainerTemplate": {
                    **container,
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi"},
                        "limits": {"cpu": "100m", "memory": "64Mi"},
                    },
                },
            }
        },
    }


def _webhook(cfg: PipelineConfig, port: int) -> dict[str, Any]:
    """Where the EventSource listens for pushes: `/push` on `port`, registered at `trigger.webhook_url`."""
    return {"endpoint": "/push", "port": str(port), "method": "POST", "url": cfg.trigger.webhook_url}


def _event_source(cfg: PipelineConfig, name: str, check: str, port: int, source: dict[str, Any]) -> dict[str, Any]:
    """An EventSource on `port` whose webhook check is stated in an annotation; `source` is its
    type-specific part (`{"github": ...}`, `{"webhook": ...}`)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "EventSource",
        "metadata": metadata(name, cfg.cluster.namespace, annotations={"paddle-mlops/webhook-check": check}),
        "spec": {
            "eventBusName": EVENT_BUS,
            "template": pod_template(EVENTSOURCE_SERVICE_ACCOUNT),
            "service": {"ports": [{"port": port, "targetPort": port}]},
            **source,
        },
    }


def github_event_source(cfg: PipelineConfig) -> dict[str, Any]:
    """GitHub push webhook; the hook itself is configured in GitHub with the same secret (no apiToken:
    the EventSource never needs write access to the repository)."""
    push = {
        "repositories": [{"owner": cfg.trigger.github_owner, "names": list(cfg.trigger.github_repositories)}],
        "webhook": _webhook(cfg, GITHUB_PORT),
        "events": ["push"],
        "webhookSecret": dict(GITHUB_SECRET),
        "contentType": "json",
        "active": True,
        "insecure": False,
    }
    return _event_source(cfg, GITHUB_SOURCE, GITHUB_CHECK, GITHUB_PORT, {"github": {"push": push}})


def gitea_event_source(cfg: PipelineConfig) -> dict[str, Any]:
    """Generic webhook for Gitea pushes, authenticated by a bearer token (see GITEA_CHECK)."""
    push = {
        **_webhook(cfg, GITEA_PORT),
        "authSecret": dict(GITEA_TOKEN),
        # A push payload is small; refusing big bodies bounds what an attacker can send.
        "maxPayloadSize": 1048576,
    }
    return _event_source(cfg, GITEA_SOURCE, GITEA_CHECK, GITEA_PORT, {"webhook": {"push": push}})


def push_filters(cfg: PipelineConfig, source: str) -> dict[str, Any]:
    """Data filters (AND-ed): branch allowed, pusher not a bot, no skip marker, not a branch deletion.

    Argo Events treats string values as regular expressions (unanchored match); with comparator
    `!=` a filter passes when a value does not match, so each `!=` filter has one alternation.
    """
    return {
        "dataLogicalOperator": "and",
        "data": [
            {
                "path": "body.ref",
                "type": "string",
                "value": [f"^refs/heads/{regex_literal(b)}$" for b in cfg.trigger.branches],
            },
            {
                "path": PAYLOAD_KEYS[source]["pusher"],
                "type": "string",
                "value": [_any_of(cfg.trigger.bot_accounts)],
                "comparator": "!=",
            },
            {
                "path": "body.head_commit.message",
                "type": "string",
                "value": ["(" + "|".join(regex_literal(m) for m in SKIP_MARKERS) + ")"],
                "comparator": "!=",
            },
            # A deleted branch arrives as a push whose `after` is forty zeros: nothing to build.
            {"path": "body.after", "type": "string", "value": ["^0{40}$"], "comparator": "!="},
        ],
    }


def workflow_resource(
    cfg: PipelineConfig,
    template: str = WORKFLOW_TEMPLATE,
    trigger: str = "git-push",
    parameters: tuple[str, ...] = WORKFLOW_PARAMETERS,
) -> dict[str, Any]:
    """What `argo submit --from workflowtemplate/<template>` creates; the parameter values filled per event."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": {
            "generateName": f"{template}-",
            "namespace": cfg.cluster.namespace,
            "labels": {**PART_OF, "paddle-mlops/trigger": trigger},
        },
        "spec": {
            "workflowTemplateRef": {"name": template},
            "arguments": {"parameters": [{"name": name, "value": ""} for name in parameters]},
        },
    }


# Sprig's trimPrefix in a trigger parameter's dataTemplate (argo-events pkg/sensors/triggers/params.go
# getValueWithTemplate: Go text/template over the event data as `.Input`).
BRANCH_TEMPLATE = '{{ trimPrefix "refs/heads/" .Input.body.ref }}'


def _source(dependency: str, source: str, name: str) -> dict[str, str]:
    """Trigger parameter source for workflow parameter `name` from `source`'s push payload."""
    if name == "git-branch":
        # The data filter already required `body.ref` to be `refs/heads/<branch>`.
        return {"dependencyName": dependency, "dataTemplate": BRANCH_TEMPLATE}
    return {"dependencyName": dependency, "dataKey": PAYLOAD_KEYS[source][name]}


def dlq_trigger(cfg: PipelineConfig, dependency: str, what: str = "push", payload: str = "body") -> dict[str, Any]:
    """After the retries, keep the undelivered payload (event data at `payload`) in a ConfigMap for a human."""
    return {
        "template": {
            "name": f"record-undelivered-{dependency}",
            "k8s": {
                "operation": "create",
                "source": {
                    "resource": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "generateName": f"undelivered-{what}-",
                            "namespace": cfg.cluster.namespace,
                            "labels": {**PART_OF, "paddle-mlops/dead-letter": "true"},
                        },
                        "data": {"payload": ""},
                    }
                },
                "parameters": [{"src": {"dependencyName": dependency, "dataKey": payload}, "dest": "data.payload"}],
            },
        },
        # Without it the sensor runs the dead-letter trigger fire-and-forget (listener.go triggerActions),
        # so its retryStrategy never applies, and the controller refuses the whole Sensor
        # (pkg/reconciler/sensor/validate.go validateDlqTrigger).
        "atLeastOnce": True,
        "retryStrategy": {"steps": 5, "duration": "5s", "factor": 2, "jitter": 0.2},
    }


def submit_trigger(
    name: str, dependency: str, resource: dict[str, Any], sources: list[dict[str, Any]], dlq: dict[str, Any]
) -> dict[str, Any]:
    """Submit `resource` with `sources[i]` as its i-th parameter value; at least once, retried, then dead-lettered."""
    return {
        "template": {
            "name": name,
            "conditions": dependency,
            "argoWorkflow": {
                "operation": "submit",
                "source": {"resource": resource},
                "parameters": [
                    {"src": src, "dest": f"spec.arguments.parameters.{index}.value"}
                    for index, src in enumerate(sources)
                ],
            },
        },
        "atLeastOnce": True,
        # API server hiccups and admission timeouts are transient: back off for about five minutes.
        # Each attempt reruns all of `argo submit` (GET the WorkflowTemplate, create) and the sensor's
        # LIST of what it created, so a step that fails after the create makes another Workflow:
        # the sensor Role grants every call (pipelines/platform/rbac.py) so none fails for want of it.
        "retryStrategy": {"steps": 6, "duration": "10s", "factor": 2, "jitter": 0.2},
        "dlqTrigger": dlq,
    }


def _trigger(cfg: PipelineConfig, source: str) -> dict[str, Any]:
    dependency = f"{source}-push"
    return submit_trigger(
        f"train-deploy-from-{source}",
        dependency,
        workflow_resource(cfg),
        [_source(dependency, source, name) for name in WORKFLOW_PARAMETERS],
        dlq_trigger(cfg, dependency),
    )


def sensor(cfg: PipelineConfig) -> dict[str, Any]:
    """One dependency per forge; each has its own trigger so parameters read the event that fired."""
    sources = (GITHUB_SOURCE, GITEA_SOURCE)
    return {
        "apiVersion": API_VERSION,
        "kind": "Sensor",
        "metadata": metadata(SENSOR, cfg.cluster.namespace),
        "spec": {
            "eventBusName": EVENT_BUS,
            "template": pod_template(SENSOR_SERVICE_ACCOUNT),
            "dependencies": [
                {"name": f"{s}-push", "eventSourceName": s, "eventName": "push", "filters": push_filters(cfg, s)}
                for s in sources
            ],
            "triggers": [_trigger(cfg, s) for s in sources],
        },
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """The bus and the push path (pipelines/platform/publish_events.py renders the publish path beside them)."""
    return [event_bus(cfg), github_event_source(cfg), gitea_event_source(cfg), sensor(cfg)]
