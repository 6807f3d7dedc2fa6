"""`paddle-mlops queue` and `submit` against a stand-in Kueue API (tests/kueue_standin.py) serving our generated
ClusterQueues with the status Kueue v0.19.2 writes: the queue view, and the three answers submit gives — fits now
in a region, queued at position N, can never fit (exit 3, nothing submitted)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from paddle_mlops import cli, queue, submit
from paddle_mlops.queue_state import KueueApi, read_state
from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import EXIT_API, EXIT_NO_CAPACITY, EXIT_OK
from tests.kueue_standin import KueueCluster, KueueCustomObjectsApi, SubmitApi, workload

NORTH, EAST = ("nlp", "cn-north-a100"), ("nlp", "cn-east-v100")


def _cluster() -> KueueCluster:
    return KueueCluster.from_install(load_config())


def lent_state() -> KueueCluster:
    """nlp runs 2 GPUs in cn-north; search runs 2 there, one of them on the GPU nlp lends (lendingLimit 2)."""
    cluster = _cluster()
    cluster.workloads = [
        workload("nlp-a", priority_class="normal", priority=1000, admitted=NORTH, created="2026-12-03T08:00:00Z"),
        workload(
            "search-a",
            priority_class="normal",
            priority=1000,
            admitted=("search", "cn-north-a100"),
            namespace="team-search",
        ),
    ]
    return cluster


def full_state() -> KueueCluster:
    """Also cn-east full (nlp 2, search 2), and three nlp runs pending: urgent, normal (older), batch."""
    cluster = lent_state()
    cluster.workloads += [
        workload("nlp-b", priority_class="normal", priority=1000, admitted=EAST),
        workload("search-b", priority_class="normal", priority=1000, admitted=("search", "cn-east-v100"),
                 namespace="team-search"),
        workload("nlp-batch", priority_class="batch", priority=100, created="2026-12-03T09:01:00Z"),
        workload("nlp-normal", priority_class="normal", priority=1000, created="2026-12-03T09:02:00Z"),
        workload("nlp-urgent", priority_class="urgent", priority=10000, created="2026-12-03T09:03:00Z"),
    ]  # fmt: skip
    return cluster


def _queue_json(cluster: KueueCluster, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert queue.main(["--json", *args], api=KueueApi(KueueCustomObjectsApi(cluster))) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def _flavor(doc: dict[str, Any], cq: str, flavor: str) -> dict[str, Any]:
    (queue_doc,) = [q for q in doc["clusterQueues"] if q["name"] == cq]
    (row,) = [f for f in queue_doc["flavors"] if f["flavor"] == flavor]
    return row


def test_queue_shows_quota_borrowing_and_lending_per_region(capsys) -> None:
    doc = _queue_json(lent_state(), capsys)
    north = _flavor(doc, "nlp", "cn-north-a100")
    assert (north["region"], north["gpu_type"]) == ("cn-north", "a100")
    assert (north["nominal"], north["borrowing_limit"], north["lending_limit"]) == (4, 0, 2)
    assert (north["used"], north["reserved"], north["borrowed"], north["lent"]) == (2, 2, 0, 1)
    search = _flavor(doc, "search", "cn-north-a100")
    assert (search["nominal"], search["used"], search["borrowed"], search["lent"]) == (1, 2, 1, 0)
    east = _flavor(doc, "nlp", "cn-east-v100")
    assert (east["nominal"], east["used"], east["lent"]) == (2, 0, 0)
    (nlp,) = [q for q in doc["clusterQueues"] if q["name"] == "nlp"]
    (admitted,) = nlp["workloads"]
    assert (admitted["state"], admitted["flavor"], admitted["region"], admitted["gpus"]) == (
        "admitted",
        "cn-north-a100",
        "cn-north",
        2,
    )
    assert admitted["job"] == "TrainJob/nlp-a" and admitted["priority_class"] == "normal"
    # --team: that team's ClusterQueue only.
    assert [q["name"] for q in _queue_json(lent_state(), capsys, "--team", "search")["clusterQueues"]] == ["search"]


@pytest.mark.parametrize("visibility", [True, False], ids=["visibility-api", "workload-status"])
def test_pending_workloads_have_kueue_positions(capsys, visibility: bool) -> None:
    """Higher priority first, then the older (kueue v0.19.2 pkg/cache/queue/cluster_queue.go baseCompareFunc), from
    the visibility API's positionInClusterQueue (from 0) where served, else computed from the Workloads."""
    cluster = full_state()
    cluster.visibility = visibility
    doc = _queue_json(cluster, capsys, "--team", "nlp")
    (nlp,) = doc["clusterQueues"]
    assert nlp["positions_from"] == ("visibility API" if visibility else "Workload status")
    pending = sorted((w for w in nlp["workloads"] if w["state"] == "pending"), key=lambda w: w["position"])
    assert [(w["job"], w["position"], w["priority"]) for w in pending] == [
        ("TrainJob/nlp-urgent", 1, 10000),
        ("TrainJob/nlp-normal", 2, 1000),
        ("TrainJob/nlp-batch", 3, 100),
    ]
    assert all(w["flavor"] is None and w["gpus"] == 2 for w in pending)
    assert "GET /apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/nlp/pendingworkloads" in cluster.calls


def test_queue_table_and_help(capsys) -> None:
    assert queue.main([], api=KueueApi(KueueCustomObjectsApi(full_state()))) == EXIT_OK
    out = capsys.readouterr().out
    assert "ClusterQueue nlp (team nlp, cohort paddle-mlops)" in out
    north = next(line for line in out.splitlines() if line.startswith("│ cn-north-a100"))  # nlp's table comes first
    cells = [c.strip() for c in north.split("│")[1:-1]]
    assert cells == ["cn-north-a100", "cn-north", "a100", "4", "0", "1", "0", "2", "2"]
    assert "nlp-urgent" in out and "urgent (10000)" in out
    with pytest.raises(SystemExit) as done:
        cli.main(["queue", "--help"])
    assert done.value.code == 0
    assert "--team" in capsys.readouterr().out


def test_reserved_but_not_admitted_counts_in_reservation_not_usage(capsys) -> None:
    """A Workload waiting for an admission check (MultiKueue's) holds quota: status.flavorsReservation counts it,
    flavorsUsage does not (apis/kueue/v1beta2/clusterqueue_types.go)."""
    cluster = _cluster()
    cluster.workloads = [workload("nlp-a", priority_class="normal", priority=1000, admitted=NORTH, reserved_only=True)]
    row = _flavor(_queue_json(cluster, capsys), "nlp", "cn-north-a100")
    assert (row["reserved"], row["used"]) == (2, 0)


def _submit(cluster: KueueCluster, capsys, *args: str) -> tuple[int, str, str]:
    code = submit.main(["-p", "git-sha=abc", *args], api=SubmitApi(cluster))
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_says_the_region_a_run_would_be_admitted_in_now(capsys) -> None:
    """cn-north has 1 GPU available to nlp (2 used, 1 lent to search and in use): the 2-GPU run does not fit
    there, and fits on nlp's own quota in cn-east."""
    cluster = lent_state()
    code, out, _ = _submit(cluster, capsys)
    assert code == EXIT_OK
    assert "submitted workflow train-deploy-q4x8z in namespace ml-pipelines" in out
    assert "would be admitted now in region cn-east (flavor cn-east-v100, on the team's own quota" in out
    assert len(cluster.created) == 1
    # A 1-GPU run still fits in the team's first region.
    code, out, _ = _submit(cluster, capsys, "--set", "training.job.workers=1")
    assert "admitted now in region cn-north" in out


def test_submit_queues_a_run_with_its_position(capsys) -> None:
    cluster = full_state()
    code, out, _ = _submit(cluster, capsys)
    assert code == EXIT_OK and len(cluster.created) == 1
    # normal priority: behind nlp-urgent and the older nlp-normal, before nlp-batch.
    assert "queued at position 3 in ClusterQueue nlp, region cn-north first" in out
    code, out, _ = _submit(cluster, capsys, "-p", "priority=urgent")
    assert "queued at position 2 in ClusterQueue nlp" in out
    code, out, _ = _submit(cluster, capsys, "-p", "priority=batch")
    assert "queued at position 4" in out


def test_submit_refuses_a_run_no_allowed_region_can_ever_hold(capsys) -> None:
    """5 GPUs: nlp can hold at most 4 in cn-north (nominal 4, borrowingLimit 0) and 4 in cn-east (nominal 2 +
    borrowingLimit 2): flavorassigner.go fitsResourceQuota NoFit against PotentialAvailable. Nothing is submitted."""
    cluster = lent_state()
    code, _, err = _submit(cluster, capsys, "--set", "training.job.workers=5")
    assert code == EXIT_NO_CAPACITY and not cluster.created
    assert "needs 5 GPUs" in err and "cn-north-a100: at most 4 (nominal 4 + borrowing limit 0)" in err
    assert "cn-east-v100: at most 4 (nominal 2 + borrowing limit 2)" in err and "configs/teams/" in err
    # 3 GPUs: within both limits; cn-north has 1 available, cn-east 4 of which 1 borrowed.
    code, out, _ = _submit(cluster, capsys, "--set", "training.job.workers=3")
    assert code == EXIT_OK and "would be admitted now in region cn-east" in out and "borrowing" in out


def test_submit_without_a_local_queue_is_an_api_error(capsys) -> None:
    cluster = lent_state()
    code, _, err = _submit(cluster, capsys, "-n", "default")
    assert code == EXIT_API and "no Kueue LocalQueue 'training'" in err and not cluster.created


def test_read_state_counts_lent_from_the_borrowers() -> None:
    state = read_state(KueueApi(KueueCustomObjectsApi(lent_state())))
    lent = {(f.cluster_queue, f.flavor): f.lent for f in state.flavors}
    assert lent[("nlp", "cn-north-a100")] == 1 and lent[("search", "cn-east-v100")] == 0


def test_a_finetune_batch_is_judged_per_job_and_placed_for_all_its_branches(capsys) -> None:
    """Each branch is one TrainJob (2 GPUs, which some region can hold); they start at once, so the room now is
    counted for 4: more than cn-north's 1 available or cn-east's nominal 2, within cn-east's borrowing."""
    cluster = lent_state()
    code, out, _ = _submit(cluster, capsys, "finetune-batch", "--task", "sentiment", "--task", "ner")
    assert code == EXIT_OK and "would be admitted now in region cn-east" in out and "borrowing" in out
    code, _, err = _submit(
        cluster, capsys, "finetune-batch", "--task", "sentiment", "--task", "ner", "--set", "training.job.workers=5"
    )
    assert code == EXIT_NO_CAPACITY and "needs 5 GPUs" in err


def test_on_a_multikueue_manager_submit_says_the_workers_choose_the_region(capsys) -> None:
    """The manager's ClusterQueue holds one accounting flavor without a region (pipelines/platform/multikueue.py):
    the answer is a dispatch to the workers, in the team's region order, and the limit is the team's ceiling."""
    cluster = KueueCluster.from_install(load_config(overrides=["cluster.multikueue=true"]))
    cluster.workloads = [workload("nlp-a", priority_class="normal", priority=1000, admitted=("nlp", "multikueue"))]
    code, out, _ = _submit(cluster, capsys)
    assert code == EXIT_OK
    assert "dispatched now to the worker clusters" in out and "holds 2 of 8 GPUs" in out and "cn-north, cn-east" in out
    code, _, err = _submit(cluster, capsys, "--set", "training.job.workers=9")
    assert code == EXIT_NO_CAPACITY and "multikueue: at most 8" in err


def test_the_official_client_asks_the_api_server_for_the_kueue_paths() -> None:
    """The same reads through kubernetes.client.CustomObjectsApi over HTTP (a local server answering from the
    stand-in): the list paths of kueue.x-k8s.io/v1beta2 and the visibility subresource, the ClusterQueue's name
    in the path (not %2F-quoted into one segment)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kubernetes import client

    cluster = full_state()
    served = KueueCustomObjectsApi(cluster)
    paths: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            paths.append(self.path)
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts[:3] == ["apis", "kueue.x-k8s.io", "v1beta2"] and len(parts) == 4:
                body, code = served.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", parts[3]), 200
            elif parts[:4] == ["apis", "visibility.kueue.x-k8s.io", "v1beta2", "clusterqueues"] and parts[5:] == [
                "pendingworkloads"
            ]:
                body, code = cluster.pending_summary(parts[4]), 200
            else:
                body, code = {"kind": "Status", "code": 404}, 404
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        api = KueueApi(client.CustomObjectsApi(client.ApiClient(config)))
        over_http = read_state(api)
    finally:
        server.shutdown()
    assert over_http == read_state(KueueApi(KueueCustomObjectsApi(full_state())))
    assert "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/nlp/pendingworkloads" in paths
    assert {"/apis/kueue.x-k8s.io/v1beta2/clusterqueues", "/apis/kueue.x-k8s.io/v1beta2/workloads"} <= set(paths)
