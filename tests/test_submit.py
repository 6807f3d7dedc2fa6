"""`paddle-mlops submit`: the Workflow `argo submit --from` would create, against a stand-in Kubernetes API; the
namespace GPU quota check of the legacy PaddleJob backends. The Kueue check of TrainJob runs: test_queue.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hera.workflows.models import Workflow
from kubernetes.client import V1ResourceQuota, V1ResourceQuotaStatus
from kubernetes.client.exceptions import ApiException

from paddle_mlops import submit as sub
from paddle_mlops_core.contracts import EXIT_API, EXIT_NO_CAPACITY, EXIT_OK, EXIT_USAGE


class FakeApi:
    """Records calls; answers the quota read with `hard`/`used` GPUs (None: no quota, 404)."""

    def __init__(self, hard: str | None = "8", used: str = "0", create_error: ApiException | None = None):
        self.hard, self.used = hard, used
        self.create_error = create_error
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def read_namespaced_resource_quota(self, name: str, namespace: str) -> V1ResourceQuota:
        self.calls.append(("read_quota", (name, namespace)))
        if self.hard is None:
            raise ApiException(status=404, reason="Not Found")
        status = V1ResourceQuotaStatus(
            hard={"requests.nvidia.com/gpu": self.hard, "pods": "100"}, used={"requests.nvidia.com/gpu": self.used}
        )
        return V1ResourceQuota(status=status)

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append(("create", (group, version, namespace, plural)))
        if self.create_error:
            raise self.create_error
        created = yaml.safe_load(yaml.safe_dump(body))
        created["metadata"]["name"] = body["metadata"]["generateName"] + "x7k2p"
        return created


class NoApi:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"dry run called the API ({name})")


def test_submit_creates_the_workflow_from_the_template():
    api = FakeApi(hard="8", used="4")
    created, placement = sub.submit(
        "train-deploy", {"git-sha": "abc123", "git-branch": "main"}, "ml-pipelines", False, api, gpus=2
    )
    assert placement is None
    assert api.calls == [
        ("read_quota", (sub.QUOTA_NAME, "ml-pipelines")),
        ("create", ("argoproj.io", "v1alpha1", "ml-pipelines", "workflows")),
    ]
    assert created["metadata"]["name"] == "train-deploy-x7k2p"
    assert created["spec"] == {
        "workflowTemplateRef": {"name": "train-deploy"},
        "arguments": {"parameters": [{"name": "git-sha", "value": "abc123"}, {"name": "git-branch", "value": "main"}]},
    }


def test_quota_without_room_submits_nothing():
    api = FakeApi(hard="8", used="7")
    with pytest.raises(sub.QuotaExceeded, match="has 1 of 8 GPUs free .* needs 2"):
        sub.submit("train-deploy", {}, "ml-pipelines", False, api, gpus=2)
    assert [c[0] for c in api.calls] == ["read_quota"]


def test_exactly_enough_room_and_no_quota_both_submit():
    api = FakeApi(hard="4", used="2")
    sub.submit("train-deploy", {}, "ns", False, api, gpus=2)
    assert api.calls[-1][0] == "create"
    api = FakeApi(hard=None)
    sub.submit("train-deploy", {}, "ns", False, api, gpus=2)
    assert api.calls[-1][0] == "create"


def test_cpu_only_run_skips_the_quota():
    api = FakeApi(hard="0", used="0")
    sub.submit("train-deploy", {}, "ns", False, api, gpus=0)
    assert [c[0] for c in api.calls] == ["create"]


def test_gpu_room_reads_client_models_and_dicts():
    assert sub.gpu_room({"status": {"hard": {"requests.nvidia.com/gpu": "4"}, "used": {}}}) == sub.GpuRoom(4, 0)
    assert sub.gpu_room({"status": {"hard": {"pods": "3"}}}) is None


def test_dry_run_prints_a_valid_workflow_without_api_calls(capsys):
    assert (
        sub.main(["train-deploy", "-p", "git-sha=abc", "-p", "git-repo=https://x/y.git", "--dry-run"], api=NoApi())
        == EXIT_OK
    )
    doc = yaml.safe_load(capsys.readouterr().out)
    workflow = Workflow.model_validate(doc)
    assert workflow.kind == "Workflow"
    assert workflow.spec.workflow_template_ref.name == "train-deploy"
    assert [(p.name, p.value) for p in workflow.spec.arguments.parameters] == [
        ("git-sha", "abc"),
        ("git-repo", "https://x/y.git"),
    ]
    assert doc["metadata"] == {"generateName": "train-deploy-", "namespace": "ml-pipelines"}


LEGACY = ["--set", "training.backend=kubeflow-paddlejob"]  # not admitted by Kueue: the namespace quota is checked


def test_main_sizes_the_gpu_request_from_config(capsys):
    api = FakeApi(hard="8", used="6")
    assert sub.main(["-p", "git-sha=abc", "--set", "training.job.workers=3", *LEGACY], api=api) == EXIT_NO_CAPACITY
    err = capsys.readouterr().err
    assert "not submitted" in err and "needs 3" in err and "configs/teams/" in err
    assert sub.main(["-p", "git-sha=abc", "-n", "team-nlp", *LEGACY], api=api) == EXIT_OK  # 2 workers × 1 GPU fit
    assert "submitted workflow train-deploy-x7k2p in namespace team-nlp" in capsys.readouterr().out


def test_bad_parameter_is_a_usage_error(capsys):
    assert sub.main(["-p", "git-sha", "--dry-run"], api=NoApi()) == EXIT_USAGE
    assert "NAME=VALUE" in capsys.readouterr().err


def test_api_refusal_is_reported_without_traceback(capsys):
    api = FakeApi(create_error=ApiException(status=403, reason="Forbidden"))
    assert sub.main(["-p", "git-sha=abc", *LEGACY], api=api) == EXIT_API
    assert "403 Forbidden" in capsys.readouterr().err


def test_finetune_batch_takes_its_tasks_from_the_command_line(capsys):
    """`submit finetune-batch --task a --task b` builds the `tasks` list (shared and per-task overrides), and the
    GPU check counts one training job per task: the branches train at once."""
    argv = ["finetune-batch", "-p", "git-sha=abc", "--task", "sentiment", "--task", "ner"]
    argv += ["--set", "training.epochs=1", "--set", "ner:model.max_seq_len=64"]
    assert sub.main([*argv, "--dry-run"], api=NoApi()) == EXIT_OK
    doc = yaml.safe_load(capsys.readouterr().out)
    params = {p["name"]: p["value"] for p in doc["spec"]["arguments"]["parameters"]}
    assert json.loads(params["tasks"]) == [
        {"task": "sentiment", "overrides": ["training.epochs=1"]},
        {"task": "ner", "overrides": ["training.epochs=1", "model.max_seq_len=64"]},
    ]
    api = FakeApi(hard="8", used="5")  # 3 free; two tasks x 2 workers x 1 GPU = 4
    assert sub.main([*argv, *LEGACY], api=api) == EXIT_NO_CAPACITY
    assert "needs 4" in capsys.readouterr().err
    assert sub.main(["train-deploy", "--task", "ner", "--dry-run"], api=NoApi()) == EXIT_OK
    assert {"name": "task", "value": "ner"} in yaml.safe_load(capsys.readouterr().out)["spec"]["arguments"][
        "parameters"
    ]
    assert sub.main(["train-deploy", "--task", "ner", "--task", "sentiment", "--dry-run"], api=NoApi()) == EXIT_USAGE
    assert "finetune-batch" in capsys.readouterr().err


def test_placement_cannot_be_set_for_one_submitted_run(capsys):
    """The submitted template was compiled with its placement: --set, -p overrides and a batch task's own
    --set NAME:data.region would reach the steps only, so they are refused with the compile-time way."""
    cases = [
        ["-p", "git-sha=abc", "--set", "data.region=cn-east"],
        ["-p", 'overrides=["training.placement.exclude_regions=[cn-north]"]'],
        ["finetune-batch", "--task", "sentiment", "--task", "ner", "--set", "ner:data.region=cn-east"],
    ]
    for argv in cases:
        assert sub.main([*argv, "--dry-run"], api=NoApi()) == EXIT_USAGE, argv
        err = capsys.readouterr().err
        assert "paddle-mlops compile --set" in err and "cannot change it" in err, err
    assert sub.main(["-p", 'overrides=["training.epochs=1"]', "--dry-run"], api=NoApi()) == EXIT_OK


def test_a_local_batch_compiles_shared_placement_and_hands_the_steps_the_rest():
    from paddle_mlops import batch

    items = batch.batch_items(["sentiment", "ner"], ["data.region=cn-east", "training.epochs=1"])
    assert [i["overrides"] for i in items] == [["training.epochs=1"], ["training.epochs=1"]]


def test_set_reaches_the_submitted_run(capsys):
    """--set of a single-task run goes into its `overrides` parameter after any -p overrides; it used to be read
    by the GPU check only, and the steps trained with the template's settings."""
    argv = ["train-deploy", "-p", 'overrides=["training.epochs=1"]', "--set", "training.learning_rate=0.00002"]
    assert sub.main([*argv, "--dry-run"], api=NoApi()) == EXIT_OK
    params = {p["name"]: p["value"] for p in yaml.safe_load(capsys.readouterr().out)["spec"]["arguments"]["parameters"]}
    assert json.loads(params["overrides"]) == ["training.epochs=1", "training.learning_rate=0.00002"]
    assert sub.main(["-p", "overrides={}", "--dry-run"], api=NoApi()) == EXIT_USAGE
    assert "not a JSON list" in capsys.readouterr().err
