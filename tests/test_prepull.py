"""The pre-pull DaemonSet lands on exactly the GPU nodes the run's TrainJob may be admitted on.

Kubernetes semantics (core/v1 NodeAffinity: terms ORed, expressions ANDed; a taint needs a matching
toleration) checked against node labels the regions' ResourceFlavors give (argo/kueue.yaml).
"""

from __future__ import annotations

from typing import Any

import yaml

from paddle_mlops.lint import lint_documents
from paddle_mlops_core.config import load_config, load_regions
from pipelines import prepull, train_deploy, trainjob
from pipelines.platform import argo_controller
from tests.kueue_admission import PodSet, flavor_matches


def _daemon_set(*overrides: str) -> dict[str, Any]:
    doc = train_deploy.build(load_config(overrides=list(overrides))).to_dict()
    (template,) = [t for t in doc["spec"]["templates"] if t["name"] == "prepull-image"]
    return yaml.safe_load(template["resource"]["manifest"])


def _lands_on(ds: dict[str, Any]) -> set[str]:
    """Regions whose GPU nodes (labelled as the region's flavor, tainted as its tolerations say) run a pod."""
    spec = ds["spec"]["template"]["spec"]
    pods = PodSet(1, {}, affinity=spec["affinity"], tolerations=tuple(spec["tolerations"]))
    landed = set()
    for region in load_regions().values():
        flavor = {"spec": {"nodeLabels": region.node_selector()}}
        taints = [t.model_dump() for t in region.tolerations]
        tolerated = all(any(t["key"] == tol["key"] for tol in spec["tolerations"]) for t in taints)
        if flavor_matches(pods, flavor) and tolerated:
            landed.add(region.name)
    return landed


def test_it_pulls_the_built_image_on_every_region_the_run_may_use() -> None:
    ds = _daemon_set()
    spec = ds["spec"]["template"]["spec"]
    (pull,) = spec["initContainers"]
    (hold,) = spec["containers"]
    assert (
        pull["image"] == hold["image"] == "registry.example.com/paddle-mlops/train@{{inputs.parameters.image-digest}}"
    )
    assert _lands_on(ds) == {"cn-north", "cn-east"}  # team nlp's regions
    assert hold["resources"]["limits"] == {"cpu": "100m", "memory": "64Mi"}
    assert "nvidia.com/gpu" not in hold["resources"]["limits"]  # it holds no GPU
    assert ds["metadata"]["labels"]["paddle-mlops/workflow"] == "{{workflow.name}}"


def test_a_data_pinned_run_warms_only_its_region() -> None:
    assert _lands_on(_daemon_set("data.region=cn-east")) == {"cn-east"}
    assert _lands_on(_daemon_set("training.placement.exclude_regions=[cn-east]")) == {"cn-north"}


def test_the_prepull_pods_pass_lint() -> None:
    cfg = load_config()
    docs = [train_deploy.build(cfg).to_dict(), trainjob.cluster_training_runtime(cfg), *argo_controller.render(cfg)]
    assert lint_documents(docs, "argo/") == []
    # The DaemonSet's pods are among those linted: a root container in it is found.
    broken = yaml.safe_load(yaml.safe_dump(docs[0]))
    (template,) = [t for t in broken["spec"]["templates"] if t["name"] == "prepull-image"]
    ds = yaml.safe_load(template["resource"]["manifest"])
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False
    template["resource"]["manifest"] = yaml.safe_dump(ds)
    assert any("hold" in f.container for f in lint_documents([broken, *docs[1:]], "argo/"))
    assert prepull.CLUSTER_ONLY  # the local executor's reason for skipping it
