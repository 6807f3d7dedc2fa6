"""The lint rules, each a generator of (rule, message, fix) for one pod or container.

The six Pod Security "restricted" controls, pinned images (a digest when `--env prod`), requests and
limits, secrets only by reference, retry and deadline on every pod-creating Argo template, and no
token-bearing `default` service account. A pod (or Argo template) annotated
`paddle-mlops/pod-security-exempt: <reason>` is exempt from the six restricted rules only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from paddle_mlops.lint.executor import EXECUTOR_FIX, EXECUTOR_MARK
from paddle_mlops.lint.pods import Pod
from paddle_mlops_core.contracts import PLACEHOLDER_DIGEST, RUN_AS_USER

RESTRICTED_RULES = (
    "run-as-non-root",
    "run-as-user",
    "allow-privilege-escalation",
    "capabilities",
    "seccomp",
    "volume-types",
)
# The restricted profile's volume types (pod-security-admission policy/check_restrictedVolumes.go).
ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECRET_WORDS = {"KEY", "SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIALS"}


def _effective(container: dict[str, Any], pod: Pod, key: str) -> Any:
    value = (container.get("securityContext") or {}).get(key)
    return value if value is not None else (pod.spec.get("securityContext") or {}).get(key)


def _restricted(pod: Pod, container: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    ctx = container.get("securityContext") or {}
    if _effective(container, pod, "runAsNonRoot") is not True:
        yield "run-as-non-root", "runAsNonRoot is not true", "set securityContext.runAsNonRoot: true (pod or container)"
    if _effective(container, pod, "runAsUser") == 0:
        yield (
            "run-as-user",
            "runs as uid 0",
            f"set securityContext.runAsUser to a non-zero uid (the images use {RUN_AS_USER})",
        )
    if ctx.get("allowPrivilegeEscalation") is not False:
        yield (
            "allow-privilege-escalation",
            "allowPrivilegeEscalation is not false",
            "set securityContext.allowPrivilegeEscalation: false",
        )
    caps = ctx.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        yield "capabilities", "capabilities are not dropped", "set securityContext.capabilities.drop: [ALL]"
    added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
    if added:
        yield "capabilities", f"adds capabilities {sorted(added)}", "add none (only NET_BIND_SERVICE is allowed)"
    seccomp = _effective(container, pod, "seccompProfile") or {}
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        yield (
            "seccomp",
            f"seccompProfile is {seccomp.get('type') or 'unset'}",
            "set securityContext.seccompProfile.type: RuntimeDefault (pod or container)",
        )


def _image(container: dict[str, Any], prod: bool) -> Iterator[tuple[str, str, str]]:
    image = container.get("image")
    if not image:
        return
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    if tag == "latest":
        yield "image-pinned", f"image {image} uses ':latest'", "pin a version tag or an @sha256 digest"
    elif tag is None and not digest:
        yield "image-pinned", f"image {image} has no tag or digest", "pin a version tag or an @sha256 digest"
    elif prod and not digest:
        yield (
            "image-digest",
            f"image {image} is not pinned by digest (--env prod)",
            "reference the image as repo@sha256:<digest>; for the install set, pin it in overlays/prod",
        )
    elif prod and digest == PLACEHOLDER_DIGEST:
        yield (
            "image-digest",
            f"image {image} carries the placeholder digest: the overlay was never filled by a release",
            "push and sign the release images, then `scripts/sign-images.sh --env prod --overlay overlays/prod` "
            "(or `paddle-mlops pin-images REPO@sha256:…`) writes their digests",
        )


def _resources(container: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    res = container.get("resources") or {}
    for part in ("requests", "limits"):
        missing = [r for r in ("cpu", "memory") if r not in (res.get(part) or {})]
        if missing:
            yield (
                "resources",
                f"no {part} for {', '.join(missing)}",
                f"set resources.{part}.cpu and resources.{part}.memory",
            )


def _secret_literals(container: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    for env in container.get("env") or []:
        words = set(re.split(r"[_.\-]", str(env.get("name", "")).upper()))
        if words & SECRET_WORDS and env.get("value") not in (None, ""):
            yield (
                "secret-literal",
                f"env {env['name']} holds a literal value",
                "use valueFrom.secretKeyRef (the value belongs in a Secret)",
            )


def _volumes(pod: Pod) -> Iterator[tuple[str, str, str]]:
    for volume in pod.spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        bad = kinds - ALLOWED_VOLUME_TYPES
        if bad:
            yield (
                "volume-types",
                f"volume {volume.get('name')} is of type {', '.join(sorted(bad))}",
                (
                    "use only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected or "
                    "secret"
                ),
            )


def _service_account(pod: Pod) -> Iterator[tuple[str, str, str]]:
    # A pod that mounts no token has no API identity, so the default account grants it nothing.
    if pod.service_account in (None, "", "default") and pod.automount is not False:
        yield (
            "service-account",
            "uses the namespace's default service account with a token mounted",
            ("set serviceAccountName to a dedicated account, or automountServiceAccountToken: false"),
        )


def _argo(pod: Pod) -> Iterator[tuple[str, str, str]]:
    template, defaults = pod.argo_template or {}, pod.argo_defaults or {}
    if not (template.get("retryStrategy") or defaults.get("retryStrategy")):
        yield "retry", "Argo template has no retryStrategy", "add retryStrategy (limit, retryPolicy, backoff)"
    if not (template.get("activeDeadlineSeconds") or defaults.get("activeDeadlineSeconds")):
        yield "deadline", "Argo template has no activeDeadlineSeconds", "add activeDeadlineSeconds to the template"


def check_pod(pod: Pod, prod: bool = False) -> Iterator[tuple[str, str, str, str]]:
    """(container, rule, message, fix) for one pod."""
    if pod.argo_template is not None:
        for finding in _argo(pod):
            yield (pod.label, *finding)
    for finding in _service_account(pod):
        yield (pod.label, *finding)
    if not pod.exempt:
        for finding in _volumes(pod):
            yield (pod.label, *finding)
    for container in pod.containers:
        where = f"{pod.label}/{container.get('name', '?')}"
        checks = [_image(container, prod), _resources(container), _secret_literals(container)]
        if not pod.exempt:
            checks.insert(0, _restricted(pod, container))
        for check in checks:
            for rule, message, fix in check:
                yield (where, rule, message, f"{fix} {EXECUTOR_FIX}" if container.get(EXECUTOR_MARK) else fix)
