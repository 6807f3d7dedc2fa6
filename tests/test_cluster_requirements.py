"""What a cluster needs is read off the install set `paddle-mlops compile` renders (cluster_requirements):
CRDs, namespaces with their Pod Security level, Secret references, controllers."""

from __future__ import annotations

from paddle_mlops import cluster_requirements
from paddle_mlops.compile import default_compile_config
from tests.kubernetes_standin import CONTROLLER_DEPLOYMENTS, EXPECTED_CRDS, NAMESPACES, SECRETS


def test_required_crds_namespaces_and_secrets_come_from_the_install_set() -> None:
    req = cluster_requirements.requirements(default_compile_config())
    assert set(req.crds) == set(EXPECTED_CRDS)
    assert {n: level for n, (level, _) in req.namespaces.items()} == NAMESPACES
    assert set(req.secrets) == SECRETS
    assert req.secrets[("ml-pipelines", "minio-credentials")] == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert req.event_bus_version == "paddle-mlops-2.10.29"  # the entry our controller settings add
    assert req.components == sorted(req.components[:1]) + req.components[1:]  # argo-workflows first
    assert set(req.components) == set(CONTROLLER_DEPLOYMENTS)


def test_paddle_operator_needs_its_crd_and_controller() -> None:
    from paddle_mlops_core.config import load_config

    cfg = load_config(
        None, None, ["training.backend=paddle-operator", "training.job.paddle_operator_init_container=false"]
    )
    req = cluster_requirements.requirements(cfg)
    assert "paddlejobs.batch.paddlepaddle.org" in req.crds and "paddlejobs.kubeflow.org" not in req.crds
    assert "paddle-operator" in req.components and "training-operator" not in req.components


def test_secret_references_are_found_by_shape() -> None:
    doc = {
        "spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol", "items": [{"key": "tls.crt", "path": "c"}]}},
                {"name": "b", "projected": {"sources": [{"secret": {"name": "proj"}}]}},
                {"name": "c", "secret": {"secretName": "maybe", "optional": True}},
            ],
            "containers": [{"envFrom": [{"secretRef": {"name": "bulk"}}]}],
            "github": {"push": {"apiToken": {"name": "gh-token", "key": "token"}}},
        }
    }
    found = {(name, key) for name, key, _ in cluster_requirements.secret_refs(doc)}
    assert found == {("pull", None), ("vol", "tls.crt"), ("proj", None), ("bulk", None), ("gh-token", "token")}


def test_a_multikueue_manager_is_checked_against_its_own_set_not_the_workers() -> None:
    from paddle_mlops_core.config import load_config

    req = cluster_requirements.requirements(load_config(overrides=["cluster.multikueue=true"]))
    assert req.multikueue and "multikueueconfigs.kueue.x-k8s.io" in req.crds
    assert "cohorts.kueue.x-k8s.io" not in req.crds  # only the workers' queues borrow from each other
    assert {file for _, file in req.namespaces.values()} <= {"tenancy.yaml"}
