"""A git push through the generated EventSources and Sensor, evaluated the way Argo Events does.

The evaluator below reads the GENERATED documents (not copies of them), so changing a filter or a
parameter in `pipelines/platform/events.py` changes what these tests see. It mirrors:
- the github EventSource: with `webhookSecret` set it rejects a delivery whose X-Hub-Signature-256
  is not `sha256=` + hex(HMAC-SHA256(secret, raw body)) (go-github's ValidatePayload, constant time);
- the generic webhook EventSource: `authSecret` requires `Authorization: Bearer <token>`;
- the Sensor's data filters and trigger parameters: `paddle_mlops.local.sensor` (the local run delivers
  its own bucket notifications through it, so the tests and the local run evaluate Sensors one way).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from typing import Any

import pytest

from paddle_mlops.local.sensor import fire
from paddle_mlops_core.config import load_config
from pipelines.platform import events

SECRETS = {
    events.GITHUB_SECRET["name"]: {events.GITHUB_SECRET["key"]: "s3cr3t-hmac-key"},
    events.GITEA_TOKEN["name"]: {events.GITEA_TOKEN["key"]: "gitea-bearer-token"},
}
SHA = "9f2c1e0b5d7a4c3e8f6b2a1d0c9e8f7a6b5c4d3e"


# --- a small mirror of Argo Events --------------------------------------------------------------


class Rejected(Exception):
    """The EventSource refused the HTTP delivery (Argo Events answers 400/401)."""


def secret_value(ref: dict[str, str]) -> str:
    return SECRETS[ref["name"]][ref["key"]]


def github_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_github_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Equivalent of go-github ValidatePayload for X-Hub-Signature-256 (what the EventSource calls)."""
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(github_signature(secret, body), header)


def deliver(event_source: dict[str, Any], headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """HTTP delivery → event data, or Rejected, per the EventSource's own spec."""
    spec = event_source["spec"]
    if "github" in spec:
        (hook,) = spec["github"].values()
        if "webhookSecret" in hook:
            if not verify_github_signature(
                secret_value(hook["webhookSecret"]), body, headers.get("X-Hub-Signature-256")
            ):
                raise Rejected("signature")
        return {"headers": {k: [v] for k, v in headers.items()}, "body": json.loads(body)}
    (hook,) = spec["webhook"].values()
    if "authSecret" in hook and headers.get("Authorization") != f"Bearer {secret_value(hook['authSecret'])}":
        raise Rejected("bearer token")
    return {"header": {k: [v] for k, v in headers.items()}, "body": json.loads(body)}


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    rendered = events.render(load_config())
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in rendered}


def push(
    ref: str = "refs/heads/main", pusher: str = "alice", message: str = "Tune the learning rate", after: str = SHA
) -> dict[str, Any]:
    return {
        "ref": ref,
        "before": "0" * 39 + "1",
        "after": after,
        "deleted": after == "0" * 40,
        "repository": {
            "full_name": "example-org/paddle-mlops",
            "clone_url": "https://github.com/example-org/paddle-mlops.git",
        },
        "pusher": {"name": pusher, "email": f"{pusher}@example.com"},
        "head_commit": {"id": after, "message": message},
    }


def github_delivery(payload: dict[str, Any], secret: str | None = None) -> tuple[dict[str, str], bytes]:
    body = json.dumps(payload).encode()
    secret = secret or SECRETS[events.GITHUB_SECRET["name"]][events.GITHUB_SECRET["key"]]
    headers = {
        "X-GitHub-Event": "push",
        "Content-Type": "application/json",
        "X-Hub-Signature-256": github_signature(secret, body),
    }
    return headers, body


def run_github(docs: dict[str, dict[str, Any]], payload: dict[str, Any]) -> list[dict[str, Any]]:
    headers, body = github_delivery(payload)
    data = deliver(docs["EventSource/github"], headers, body)
    return fire(docs[f"Sensor/{events.SENSOR}"], "github", data)


def arguments(workflow: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}


# --- tests ---------------------------------------------------------------------------------------


def test_signed_push_to_main_submits_train_deploy_with_the_commit(docs):
    (workflow,) = run_github(docs, push())
    assert workflow["kind"] == "Workflow"
    assert workflow["spec"]["workflowTemplateRef"] == {"name": "train-deploy"}
    assert workflow["metadata"]["generateName"] == "train-deploy-"
    assert arguments(workflow) == {
        "git-sha": SHA,
        "git-repo": "https://github.com/example-org/paddle-mlops.git",
        "git-branch": "main",  # the short name, as the template default and the CronWorkflow pass it
        "pusher": "alice",
    }


@pytest.mark.parametrize(
    "payload",
    [
        push(pusher="dependabot[bot]"),
        push(pusher="renovate[bot]"),
        push(message="Bump version [skip ci]"),
        push(message="docs only\n\n[ci skip]"),
        push(ref="refs/heads/feature/x"),
        push(ref="refs/heads/main-old"),
        push(ref="refs/tags/v1.0"),
        push(after="0" * 40),
    ],
    ids=["dependabot", "renovate", "skip-ci", "ci-skip", "other-branch", "prefix-branch", "tag", "deleted-branch"],
)
def test_filtered_pushes_do_not_trigger(docs, payload):
    assert run_github(docs, payload) == []


def test_bot_name_is_matched_whole_not_as_substring(docs):
    # "dependabot[bot]" must not be read as a character class that also matches human names.
    assert len(run_github(docs, push(pusher="bob"))) == 1
    assert len(run_github(docs, push(pusher="xdependabot[bot]y"))) == 1


def test_bad_or_missing_signature_is_rejected(docs):
    headers, body = github_delivery(push(), secret="wrong-secret")
    with pytest.raises(Rejected):
        deliver(docs["EventSource/github"], headers, body)
    headers, body = github_delivery(push())
    with pytest.raises(Rejected):
        deliver(docs["EventSource/github"], headers, body + b" ")  # body altered after signing
    del headers["X-Hub-Signature-256"]
    with pytest.raises(Rejected):
        deliver(docs["EventSource/github"], headers, body)


def test_github_source_verifies_hmac_with_secret_reference(docs):
    hook = docs["EventSource/github"]["spec"]["github"]["push"]
    assert hook["webhookSecret"] == {"name": "github-webhook-secret", "key": "secret"}
    assert hook["events"] == ["push"]
    assert "apiToken" not in hook  # the EventSource needs no write access to the repository


def test_gitea_push_needs_the_bearer_token(docs):
    payload = push(pusher="unused")
    payload["pusher"] = {"login": "carol"}
    body = json.dumps(payload).encode()
    with pytest.raises(Rejected):
        deliver(docs["EventSource/gitea"], {"Authorization": "Bearer nope"}, body)
    data = deliver(docs["EventSource/gitea"], {"Authorization": "Bearer gitea-bearer-token"}, body)
    (workflow,) = fire(docs[f"Sensor/{events.SENSOR}"], "gitea", data)
    assert arguments(workflow)["git-sha"] == SHA
    assert arguments(workflow)["pusher"] == "carol"
    assert "HMAC" in docs["EventSource/gitea"]["metadata"]["annotations"]["paddle-mlops/webhook-check"]


def test_trigger_parameters_follow_the_workflow_parameter_order(docs):
    for trigger in docs[f"Sensor/{events.SENSOR}"]["spec"]["triggers"]:
        workflow = trigger["template"]["argoWorkflow"]
        names = [p["name"] for p in workflow["source"]["resource"]["spec"]["arguments"]["parameters"]]
        assert names == list(events.WORKFLOW_PARAMETERS)
        dests = [p["dest"] for p in workflow["parameters"]]
        assert dests == [f"spec.arguments.parameters.{i}.value" for i in range(len(names))]
        assert workflow["operation"] == "submit"


def test_trigger_is_at_least_once_with_retries_and_dead_letter(docs):
    for trigger in docs[f"Sensor/{events.SENSOR}"]["spec"]["triggers"]:
        assert trigger["atLeastOnce"] is True
        assert trigger["retryStrategy"]["steps"] >= 3
        # listener.go runs a trigger without atLeastOnce fire-and-forget: no retries, no failure seen.
        assert trigger["dlqTrigger"]["atLeastOnce"] is True
        dlq = trigger["dlqTrigger"]["template"]["k8s"]
        assert dlq["operation"] == "create"
        assert dlq["source"]["resource"]["kind"] == "ConfigMap"
        assert dlq["parameters"][0]["dest"] == "data.payload"


def test_dead_letter_configmap_is_a_valid_core_object(docs):
    import kubernetes_validate

    trigger = docs[f"Sensor/{events.SENSOR}"]["spec"]["triggers"][0]
    configmap = copy.deepcopy(trigger["dlqTrigger"]["template"]["k8s"]["source"]["resource"])
    configmap["data"]["payload"] = json.dumps(push())
    kubernetes_validate.validate(configmap, "1.30.0", strict=True)


def test_pushes_need_a_jetstream_bus_for_at_least_once(docs):
    bus = docs["EventBus/default"]
    assert bus["spec"]["jetstream"]["version"] == events.JETSTREAM_VERSION  # tests/test_upstream_argo_events.py
    for name in ("EventSource/github", "EventSource/gitea", f"Sensor/{events.SENSOR}"):
        assert docs[name]["spec"]["eventBusName"] == "default"


def test_branch_filter_follows_the_branch_list(monkeypatch):
    cfg = load_config(overrides=['trigger.branches=["main", "release/2.x"]'])
    rendered = {f"{d['kind']}/{d['metadata']['name']}": d for d in events.render(cfg)}
    (workflow,) = run_github(rendered, push(ref="refs/heads/release/2.x"))
    assert arguments(workflow)["git-branch"] == "release/2.x"
    assert run_github(rendered, push(ref="refs/heads/release/22x")) == []
