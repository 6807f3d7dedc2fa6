"""Our keys in the upstream controllers' own objects, patched in so that nobody's keys are deleted.

Three controllers read settings the install set needs from objects their own install created: the Argo Workflows
`workflow-controller-configmap` (`executor`, `metricsConfig`), Knative Serving's `config-features` (the predictors'
nodeSelector and tolerations), and Argo Events' controller config and Deployment (the images of the pods it creates).
A client-side `kubectl apply` of such an object computes what to delete from the live object's
`kubectl.kubernetes.io/last-applied-configuration`, whoever wrote it (kubectl pkg/cmd/apply/patcher.go →
apimachinery strategicpatch CreateThreeWayMergePatch): our apply would delete the upstream install's labels and keys,
and the next upstream install would delete ours. `kubectl apply --server-side` is no way out either: on an object a
client-side apply created, kubectl moves that manager's fields to the server-side manager after the apply and applies
again (kubectl pkg/cmd/apply/apply.go migrateToSSAIfNecessary → csaupgrade.UpgradeManagedFieldsPatch), so our manager
would then own, and prune, every upstream key and label our documents lack.

So these documents are not in `argo/kustomization.yaml`; each file is one object, applied as a strategic merge patch
of the live object:

    for f in argo/controller-settings/*.yaml; do kubectl patch -f "$f" --type strategic --patch-file "$f"; done

A strategic merge patch sets the keys it names and deletes none (maps merge key by key; containers and env merge by
`name`, their patchMergeKey), touches no last-applied annotation and moves no field ownership; the next upstream
client-side apply deletes only keys its own last-applied configuration dropped. Where upstream's manifest names the
same key (Argo Events' `controller-config.yaml`, `ARGO_EVENTS_IMAGE`), its apply writes upstream's value back:
`paddle-mlops preflight` reports that, and the same loop restores it. A release overlay
(overlays/<env>/controller-settings/) holds the same documents with the images pinned by its digests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from pipelines.platform import argo_controller, events_controller, knative

DIRECTORY = "controller-settings"


def apply_command(directory: str, file: str | None = None) -> str:
    """The command that patches `directory`'s settings (or one `file` of it) into the live objects."""
    if file is not None:
        return f"kubectl patch -f {directory}/{file} --type strategic --patch-file {directory}/{file}"
    return f'for f in {directory}/*.yaml; do kubectl patch -f "$f" --type strategic --patch-file "$f"; done'


def render(cfg: PipelineConfig, pins: Mapping[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """File name under the settings directory → its one document (`kubectl patch -f` patches every object a file
    names with the same patch); `pins` (an overlay's repository → digest) pins the
    images the controllers give their pods."""
    return {
        "argo-workflows.yaml": argo_controller.render(cfg, pins),
        "argo-events-config.yaml": [events_controller.controller_configmap(pins)],
        "argo-events-image.yaml": [events_controller.controller_image_env(pins)],
        "knative.yaml": knative.render(cfg),
    }


def render_files(cfg: PipelineConfig, pins: Mapping[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The same, keyed by the path under argo/ (or an overlay)."""
    return {f"{DIRECTORY}/{name}": docs for name, docs in render(cfg, pins).items()}
