"""Preflight's checks of the objects the install set needs to exist beforehand: every CRD it uses,
serving the version it uses, and every Secret it refers to (by name only)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from paddle_mlops.cluster_requirements import Crd, Requirements
from paddle_mlops.preflight.cluster import KubernetesApi
from paddle_mlops.preflight.results import FINDING, INSTALL, OK, Result, install_fix
from paddle_mlops_core.versions import MATRIX

# Secret keys that hold a file's content (certificates, keys, docker config); others get a literal.
FILE_KEY = re.compile(r"^\.|\.(crt|key|pem|pub|json|dockerconfigjson)$")


def check_crds(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    live = api.custom_resource_definitions()
    for crd in sorted(req.crds.values(), key=lambda c: c.name):
        yield _crd_result(crd, live)


def _crd_result(crd: Crd, live: list[Any]) -> Result:
    match = next((c for c in live if c.metadata.name == crd.name), None) or next(
        (c for c in live if c.spec.group == crd.group and crd.kind and c.spec.names.kind == crd.kind), None
    )
    owner = MATRIX[crd.component].name if crd.component in MATRIX else f"the owner of {crd.group}"
    fix = install_fix(crd.component) if crd.component in INSTALL else f"install {owner}"
    if match is None:
        kind = f"kind {crd.kind}, " if crd.kind else ""
        return Result("crd", crd.name, FINDING, f"missing ({kind}installed by {owner})", fix)
    served = [v.name for v in match.spec.versions or [] if v.served]
    if crd.version and crd.version not in served:
        message = f"serves {', '.join(served) or 'no version'}, not {crd.version} (an older {owner}?)"
        return Result("crd", crd.name, FINDING, message, f"upgrade: {fix}")
    return Result("crd", crd.name, OK, f"present ({', '.join(served)})")


def check_secrets(api: KubernetesApi, req: Requirements) -> Iterator[Result]:
    for (namespace, name), keys in sorted(req.secrets.items()):
        if api.secret_exists(name, namespace):
            yield Result("secret", f"{namespace}/{name}", OK, "exists")
            continue
        sources = (
            " ".join(
                f"--from-file={k}=<file>" if FILE_KEY.search(k) else f"--from-literal={k}=<value>" for k in sorted(keys)
            )
            or "--from-file=<directory>"
        )
        # Registry credentials must be of this type: go-containerregistry pkg/authn/kubernetes/keychain.go (Kyverno's
        # keychain) and the kubelet read .dockerconfigjson only from a Secret of type kubernetes.io/dockerconfigjson.
        kind = " --type=kubernetes.io/dockerconfigjson" if ".dockerconfigjson" in keys else ""
        fix = f"kubectl create secret generic {name} -n {namespace}{kind} {sources}"
        yield Result("secret", f"{namespace}/{name}", FINDING, "missing", fix)
