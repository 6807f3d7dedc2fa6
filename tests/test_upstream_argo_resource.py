"""Why the training job is not placed by an Argo resource template: what its executor does with an existing or a
missing object, and what `retries` in its action would do.

Upstream behaviour encoded here (argoproj/argo-workflows v4.1.2):
- workflow/executor/resource.go ExecResource: `kubectl <action> -f manifest -o json`, retried by
  retry.OnError(retry.DefaultBackoff, IsTransientErr) only for transient errors (util/errors/errors.go isTransientErr:
  network and etcd messages); AlreadyExists on a create and NotFound on a get are not transient, so the executor
  fails at once ("no more retries ...", argoexec exit 64): node phase Failed. A create whose answer was lost (a
  connection reset: transient) is sent again and meets AlreadyExists. WaitResource then polls the object: NotFound
  while waiting is fatal ("The resource has been deleted while its status was still being checked").
- workflow/controller/operator.go executeTemplate: each attempt of a template with a retryStrategy is a child of the
  retry node, and `retries` is set to its number (len(children)) for that attempt only; workflow/util/util.go
  FormulateRetryWorkflow (`argo retry`) deletes the failed attempts, so the retried step starts at attempt 0 again.
- `kubectl apply` on a custom resource computes a three-way JSON merge patch (k8s.io/apimachinery
  jsonmergepatch.CreateThreeWayJSONMergePatch: changes from the live object to the manifest, plus deletions from the
  last-applied one), RFC 7386 semantics: lists are replaced whole. On a TrainJob Kueue admitted, that sets
  `spec.suspend: true` again and replaces `spec.runtimePatches` without Kueue's entry (kueue v0.19.2
  pkg/controller/jobs/trainjob/trainjob_controller.go RunWithPodSetsInfo writes it under `kueue.x-k8s.io/manager`).
So the train step is a container that creates or reuses by itself (pipelines/train_step.py, tests/test_train_job.py).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from paddle_mlops.compile import default_compile_config, dump
from pipelines import train_deploy
from tests.expr_lang import value
from tests.test_upstream_training_operator import train_manifest

# The action the train resource template had before issue #59: create on attempt 0, get on every retry.
RETRIES_ACTION = "{{=retries == '0' ? 'create' : 'get'}}"
# validate.go: the actions a resource template may have once its expressions are evaluated.
VALID_ACTIONS = {"get", "create", "apply", "delete", "replace", "patch"}
PLACEHOLDER = "__argo__internal__placeholder-7"  # common.NewPlaceholderGenerator's form


class Failed(Exception):
    """The executor's kubectl call failed and is not retried (exit 64: the node is Failed)."""


class Cluster:
    """The objects `kubectl` sees, by name."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def kubectl(self, action: str, manifest: dict[str, Any], answer_lost: bool = False) -> str:
        """ExecResource: one kubectl call, again while the error is transient (a lost answer is a connection
        reset); AlreadyExists and NotFound are not transient."""
        name = manifest["metadata"]["name"]
        if action == "create":
            if name in self.objects:
                raise Failed(f'no more retries Error from server (AlreadyExists): trainjobs "{name}" already exists')
            self.objects[name] = copy.deepcopy(manifest)
            if answer_lost:  # transient: the executor sends the create again
                return self.kubectl("create", manifest)
            return f"create {name}"
        if action == "get":
            if name not in self.objects:
                raise Failed(f'no more retries Error from server (NotFound): trainjobs "{name}" not found')
            return f"get {name}"
        raise AssertionError(action)


def action_for(action: str, retries: str) -> str:
    """The action after Argo substitutes the attempt's `retries` (an expression tag, or a plain action)."""
    match = re.fullmatch(r"\{\{=(.*)\}\}", action)
    return value(match.group(1), {"retries": retries}) if match else action


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    text = yaml.safe_dump(train_manifest(dump([train_deploy.build(default_compile_config()).to_dict()])))
    return yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", text.replace("{{workflow.name}}", "train-deploy-a1b2c")))


def test_retries_is_set_per_attempt_and_the_validator_sees_a_placeholder() -> None:
    assert action_for(RETRIES_ACTION, "0") == "create"
    assert [action_for(RETRIES_ACTION, str(n)) for n in (1, 2, 3)] == ["get", "get", "get"]
    assert action_for(RETRIES_ACTION, PLACEHOLDER) in VALID_ACTIONS  # submission passes validate.go


def test_the_executor_fails_a_create_that_finds_the_object_and_a_get_that_does_not(manifest: dict[str, Any]) -> None:
    cluster = Cluster()
    assert cluster.kubectl("create", manifest) == "create train-deploy-a1b2c-train"
    with pytest.raises(Failed, match="AlreadyExists"):
        cluster.kubectl("create", manifest)
    with pytest.raises(Failed, match="NotFound"):
        Cluster().kubectl("get", manifest)
    # A create whose answer was lost is sent again by the executor itself and meets its own object.
    with pytest.raises(Failed, match="AlreadyExists"):
        Cluster().kubectl("create", manifest, answer_lost=True)


def test_an_action_chosen_by_retries_cannot_create_or_reuse(manifest: dict[str, Any]) -> None:
    """Defect 2 of issue #59, on the old action: attempt 0 ended before its create, so every retry `get`s a job that
    does not exist; and a create whose answer was lost fails its own attempt with AlreadyExists. The train step now
    creates or reuses in every attempt (tests/test_train_job.py runs both interleavings to a trained model)."""
    cluster = Cluster()
    with pytest.raises(Failed, match="NotFound"):  # attempt 0 died before kubectl create; attempt 1:
        cluster.kubectl(action_for(RETRIES_ACTION, "1"), manifest)
    with pytest.raises(Failed, match="AlreadyExists"):
        cluster.kubectl(action_for(RETRIES_ACTION, "0"), manifest, answer_lost=True)


def merge_patch(source: Any, target: Any) -> Any:
    """RFC 7386 diff (jsonpatch.CreateMergePatch): what turns `source` into `target`; lists replaced whole."""
    if not (isinstance(source, dict) and isinstance(target, dict)):
        return target
    patch: dict[str, Any] = {key: None for key in source if key not in target}
    for key, item in target.items():
        if key not in source:
            patch[key] = item
        elif source[key] != item:
            patch[key] = merge_patch(source[key], item)
    return patch


def _split(patch: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(additions and changes, deletions) of a merge patch (kubectl's keepOrDeleteNullInJsonPatch both ways)."""
    changes: dict[str, Any] = {}
    deletions: dict[str, Any] = {}
    for key, item in patch.items():
        if item is None:
            deletions[key] = None
        elif isinstance(item, dict):
            inner_changes, inner_deletions = _split(item)
            if inner_changes:
                changes[key] = inner_changes
            if inner_deletions:
                deletions[key] = inner_deletions
        else:
            changes[key] = item
    return changes, deletions


def three_way_patch(original: dict[str, Any], modified: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """jsonmergepatch.CreateThreeWayJSONMergePatch: additions and changes current -> modified, deletions
    original -> modified (top-level merge is enough for the keys compared below)."""
    changes, _ = _split(merge_patch(current, modified))
    _, deletions = _split(merge_patch(original, modified))
    return {**deletions, **changes}


def test_apply_would_suspend_an_admitted_job_and_drop_kueues_patch(manifest: dict[str, Any]) -> None:
    assert manifest["spec"]["suspend"] is True  # created suspended: nothing starts before Kueue admits it
    live = copy.deepcopy(manifest)
    live["spec"]["suspend"] = False  # Kueue admitted it (jobframework/reconciler.go startJob)
    kueue = {
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {"spec": {"template": {"spec": {"nodeSelector": {"region": "cn-north"}}}}},
                        }
                    ]
                }
            }
        },
    }
    live["spec"]["runtimePatches"].append(kueue)  # fmt: skip
    live["status"] = {"conditions": [{"type": "Suspended", "status": "False"}]}
    patch = three_way_patch(manifest, manifest, live)
    assert patch["spec"]["suspend"] is True  # the running job would be suspended: pods deleted
    assert kueue not in patch["spec"]["runtimePatches"]  # Kueue's placement gone
    assert "status" not in patch
