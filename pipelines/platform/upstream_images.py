"""The images the upstream controllers put into the pods they create for the install set, and how a release pins them.

Argo Workflows adds `init`/`wait` (argoexec) to every workflow pod with the image of the controller's `executor`
setting, else its own `--executor-image` default, `quay.io/argoproj/argoexec:<controller version>` (argo-workflows
v4.1.2 workflow/controller/config.go `executorImage`). Argo Events runs every EventSource and Sensor pod on its
controller's `ARGO_EVENTS_IMAGE` environment variable (argo-events v1.9.11 pkg/reconciler/cmd/start.go) and every
JetStream EventBus pod on the three images its controller config lists for the bus's `jetstream.version`
(pkg/reconciler/eventbus/installer/jetstream.go: containers main, reloader, metrics). None of these images is a field
of our manifests, so kustomize's images: cannot reach them: the controller settings name them
(pipelines/platform/controller_settings.py), tagged in argo/, by digest in each release overlay.
"""

from __future__ import annotations

from collections.abc import Mapping

from paddle_mlops_core.contracts import image_repository
from paddle_mlops_core.versions import MATRIX

ARGOEXEC = f"quay.io/argoproj/argoexec:v{MATRIX['argo-workflows'].tested}"
ARGO_EVENTS = f"quay.io/argoproj/argo-events:v{MATRIX['argo-events'].tested}"
# Argo Events v1.9.11's controller config, version 2.10.29 (manifests/base/controller-manager/controller-config.yaml).
NATS_VERSION = "2.10.29"
NATS = f"nats:{NATS_VERSION}"
NATS_EXPORTER = "natsio/prometheus-nats-exporter:0.14.0"
NATS_RELOADER = "natsio/nats-server-config-reloader:0.14.0"

CONTROLLER_IMAGES = (ARGOEXEC, ARGO_EVENTS, NATS, NATS_EXPORTER, NATS_RELOADER)


def pinned(image: str, pins: Mapping[str, str]) -> str:
    """`image` as kustomize's images: transformer rewrites it for a `{name, digest}` entry: `repo@digest` when
    `pins` (repository → digest, an overlay's images:) pins its repository, else unchanged."""
    digest = pins.get(image_repository(image))
    return f"{image_repository(image)}@{digest}" if digest else image
