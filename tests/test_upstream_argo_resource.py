"""A retried train step cannot leave two training jobs: what Argo's resource template does with an existing object.

Upstream behaviour encoded here (argoproj/argo-workflows v4.1.2):
- workflow/executor/resource.go ExecResource/getKubectlArguments: a resource step runs `kubectl <action> -f
  manifest -o json` (retrying only transient errors: util/errors/errors.go isTransientErr, where AlreadyExists and
  NotFound are not), then WaitResource polls the object it named for the success/failure conditions. `create` of an
  object that exists fails; with `generateName` every attempt creates a new one; `get` reads the one that exists.
- workflow/controller/operator.go executeTemplate: each attempt of a template with a retryStrategy is a child of
  the retry node, and `retries` is set to its number (len(children)) for that attempt only;
  util/template/expression_template.go: an expression naming `retries` is left unevaluated until then
  (variablesToCheck); workflow/validate/validate.go gives `retries` a placeholder value at submission and accepts
  a resource action that evaluates to get/create/apply/delete/replace/patch.
- workflow/util/util.go FormulateRetryWorkflow (`argo retry`): failed attempts are deleted from the retry node's
  children, so the retried step starts again at attempt 0.
- `kubectl apply` on a custom resource computes a three-way JSON merge patch (k8s.io/apimachinery
  jsonmergepatch.CreateThreeWayJSONMergePatch: changes from the live object to the manifest, plus deletions from the
  last-applied one), RFC 7386 semantics: lists are replaced whole. On a TrainJob Kueue admitted, that sets
  `spec.suspend: true` again and replaces `spec.runtimePatches` without Kueue's entry (kueue v0.19.2
  pkg/controller/jobs/trainjob/trainjob_controller.go RunWithPodSetsInfo writes it under `kueue.x-k8s.io/manager`).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from paddle_mlops.compile import default_compile_config, dump
from pipelines import resource_templates, train_deploy
from tests.expr_lang import value
from tests.test_upstream_training_operator import train_template

# validate.go: the actions a resource template may have once its expressions are evaluated.
VALID_ACTIONS = {"get", "create", "apply", "delete", "replace", "patch"}
PLACEHOLDER = "__argo__internal__placeholder-7"  # common.NewPlaceholderGenerator's form


class ApiError(Exception):
    """kubectl's error from the API server (reason AlreadyExists / NotFound): not transient for Argo."""


class Cluster:
    """The objects `kubectl` sees, by name; generateName gets a fresh suffix like the API server's."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.generated = 0

    def kubectl(self, action: str, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        if action == "create":
            name = meta.get("name") or f"{meta['generateName']}{self.generated:05d}"
            self.generated += 1
            if name in self.objects:
                raise ApiError(f'AlreadyExists: trainjobs "{name}" already exists')
            self.objects[name] = {**copy.deepcopy(manifest), "metadata": {**meta, "name": name}}
            return self.objects[name]
        if action == "get":
            if meta.get("name") not in self.objects:
                raise ApiError(f'NotFound: trainjobs "{meta.get("name")}" not found')
            return self.objects[meta["name"]]
        raise AssertionError(action)


def rendered_train(cfg: Any, workflow: str) -> tuple[str, dict[str, Any]]:
    """The train template's action and manifest with the workflow's name and inputs filled in."""
    train = train_template(dump([train_deploy.build(cfg).to_dict()]))
    text = train["resource"]["manifest"].replace("{{workflow.name}}", workflow)
    text = re.sub(r"\{\{[^}]*\}\}", "x", text)
    return train["resource"]["action"], yaml.safe_load(text)


def action_for(action: str, retries: str) -> str:
    """The action after Argo substitutes the attempt's `retries` (an expression tag, or a plain action)."""
    match = re.fullmatch(r"\{\{=(.*)\}\}", action)
    return value(match.group(1), {"retries": retries}) if match else action


@pytest.fixture(scope="module")
def cfg() -> Any:
    return default_compile_config()


def test_the_action_is_create_on_the_first_attempt_and_get_on_a_retry(cfg: Any) -> None:
    action, manifest = rendered_train(cfg, "train-deploy-a1b2c")
    assert action == resource_templates.TRAIN_ACTION
    assert action_for(action, "0") == "create"
    assert [action_for(action, str(n)) for n in (1, 2, 3)] == ["get", "get", "get"]
    # At submission the validator substitutes a placeholder for `retries`: the result must be a valid action.
    assert action_for(action, PLACEHOLDER) in VALID_ACTIONS
    # A fixed name per workflow (and task in a batch branch), so that `get` finds what `create` made.
    assert manifest["metadata"]["name"] == "train-deploy-a1b2c-train" and "generateName" not in manifest["metadata"]
    assert manifest["metadata"]["labels"]["paddle-mlops/workflow"] == "train-deploy-a1b2c"


def run_attempts(action: str, manifest: dict[str, Any], cluster: Cluster, attempts: int) -> list[str]:
    """`attempts` attempts of the train step (each earlier one errored: its pod lost mid-wait); what each did."""
    done = []
    for retries in range(attempts):
        verb = action_for(action, str(retries))
        try:
            done.append(f"{verb} {cluster.kubectl(verb, manifest)['metadata']['name']}")
        except ApiError as exc:
            done.append(f"{verb} failed: {exc}")
    return done


def test_a_retried_train_step_waits_on_the_job_it_created(cfg: Any) -> None:
    action, manifest = rendered_train(cfg, "train-deploy-a1b2c")
    cluster = Cluster()
    assert (
        run_attempts(action, manifest, cluster, 3)
        == ["create train-deploy-a1b2c-train"] + ["get train-deploy-a1b2c-train"] * 2
    )
    assert list(cluster.objects) == ["train-deploy-a1b2c-train"]  # one job, on one set of GPUs


def test_what_generate_name_and_create_did_on_a_retry() -> None:
    """The template before this: every attempt created a job; the first still held its GPUs."""
    cluster = Cluster()
    manifest = {"kind": "TrainJob", "metadata": {"generateName": "train-deploy-a1b2c-train-"}}
    assert run_attempts("create", manifest, cluster, 3) == [
        f"create train-deploy-a1b2c-train-{i:05d}" for i in range(3)
    ]
    assert len(cluster.objects) == 3
    # And create under a fixed name alone would fail every retry, leaving the job to the exit hook.
    fixed = Cluster()
    results = run_attempts("create", {"kind": "TrainJob", "metadata": {"name": "wf-train"}}, fixed, 2)
    assert results[1].startswith("create failed: AlreadyExists")


def test_argo_retry_after_a_failure_creates_the_job_again(cfg: Any) -> None:
    """A failed train step: its exit hook deleted the job; `argo retry` deletes the failed attempts, so the retried
    step's first attempt is attempt 0 again and creates the job under the same name, which resumes from the run's
    checkpoints (they follow the run id, not this name)."""
    action, manifest = rendered_train(cfg, "train-deploy-a1b2c")
    cluster = Cluster()
    run_attempts(action, manifest, cluster, 3)
    cluster.objects.clear()  # delete-train-jobs, the exit hook of the failed task
    assert run_attempts(action, manifest, cluster, 1) == ["create train-deploy-a1b2c-train"]


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


def test_apply_would_suspend_an_admitted_job_and_drop_kueues_patch(cfg: Any) -> None:
    _, manifest = rendered_train(cfg, "train-deploy-a1b2c")
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
