"""`images:` the images the pipeline runs, every one pinned: a version tag or a digest, never ':latest'."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from paddle_mlops_core.config.strict import Strict

_PINNED_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$")


def check_pinned_image(ref: str) -> str:
    """An image reference must carry a tag other than `latest`, or a digest."""
    if not _PINNED_IMAGE.match(ref):
        raise ValueError(f"{ref!r} is not a valid image reference")
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    has_digest = "@sha256:" in ref
    tag = last.split(":", 1)[1] if ":" in last else None
    if tag == "latest":
        raise ValueError(f"{ref!r} uses ':latest'; pin a version tag or a digest")
    if tag is None and not has_digest:
        raise ValueError(f"{ref!r} has no tag; pin a version tag or a digest")
    return ref


class ImagesConfig(Strict):
    """Every image pinned: a version tag or a digest, never ':latest'."""

    registry: str = "registry.example.com/paddle-mlops"
    train: str = "registry.example.com/paddle-mlops/train:0.1.0"
    serve: str = "registry.example.com/paddle-mlops/serve:0.1.0"
    tools: str = "registry.example.com/paddle-mlops/tools:0.1.0"
    buildkit: str = "moby/buildkit:v0.32.2-rootless"
    registry_secret: str = Field(
        "registry-push-credentials",
        pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
        description="Secret of type kubernetes.io/dockerconfigjson with the registry's credentials: the build step "
        "pushes with it (pipeline namespace), Kyverno reads image signatures with it (a copy in the kyverno "
        "namespace: verifyImages imageRegistryCredentials)",
    )
    require_digest: bool = Field(
        False,
        description="every image this environment's pods run must be pinned by a real digest: the tags above are "
        "the release names, and `digest_overlay`'s `images:` pins each by digest (lint --env and preflight check it)",
    )
    digest_overlay: str | None = Field(
        None,
        description="the kustomize overlay (a directory of the checkout, e.g. overlays/prod) whose `images:` "
        "pin the install set by digest; `paddle-mlops pin-images` fills it at release",
    )

    @field_validator("train", "serve", "tools", "buildkit")
    @classmethod
    def _pinned(cls, v: str) -> str:
        return check_pinned_image(v)
