"""The release overlay: `overlays/<env>/kustomization.yaml` pins every image of the install set by digest.

`paddle-mlops compile` writes the install set with the release tags of the configuration (`images.tools:
…/tools:0.1.0`); production must not run a tag. The overlay takes argo/ as its base and lists, under `images:`, one
entry per image the install set runs without a digest, in the form `kustomize edit set image NAME@sha256:…` writes
(`{digest, name}`, sorted by name), so kustomize rewrites `NAME:tag` to `NAME@sha256:…` wherever a pod runs it.
Its `configurations:` teach kustomize where Argo keeps images (a template's `container`/`script`, which kustomize's
built-in image transformer does not look at: kustomize api/filters/imagetag/legacy.go walks only `containers` and
`initContainers` lists).

The digests are release data, not generated: `paddle-mlops pin-images` (paddle_mlops/pin_images.py) writes them
from the pushed images (scripts/sign-images.sh --overlay does it after signing). Until then each one is
`PLACEHOLDER_DIGEST`, which `lint --env prod` and `preflight` report. The names are generated data: `compile --check`
fails when an overlay lists other images than the install set runs by tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from paddle_mlops.lint import controller_executor, pods_of
from paddle_mlops.lint.events_images import events_images
from paddle_mlops.lint.trainjob import runtimes_in
from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PLACEHOLDER_DIGEST, image_repository
from pipelines.platform import controller_settings

KUSTOMIZATION = "kustomization.yaml"
DEFAULT_OVERLAY = "overlays/prod"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class OverlayError(Exception):
    """An overlay or a reference that cannot be used; the message says which and what to do."""


def tagged_images(docs: Iterable[dict[str, Any]]) -> list[str]:
    """Every image the documents' pods run by tag (a digest, or an Argo parameter that becomes one, pins the others
    at run time), as written: what a release resolves and an overlay pins."""
    docs = list(docs)
    executor, runtimes, events = controller_executor(docs), runtimes_in(docs), events_images(docs)
    images = set()
    for doc in docs:
        for pod in pods_of(doc, executor, runtimes, events):
            for container in pod.containers:
                image = str(container.get("image") or "")
                if image and "@" not in image and "{{" not in image:
                    images.add(image)
    return sorted(images)


def unpinned_repositories(docs: Iterable[dict[str, Any]]) -> list[str]:
    """The repositories of `tagged_images`: the names an overlay's images: must list."""
    return sorted({image_repository(image) for image in tagged_images(docs)})


def overlays_of(base: Path) -> list[Path]:
    """The overlay directories beside `base` (`<base>/../overlays/<env>/`) whose resources include `base`. An
    overlay cannot sit inside its base: kustomize refuses a base root that contains the overlay's."""
    found = []
    for path in sorted((base.resolve().parent / "overlays").glob(f"*/{KUSTOMIZATION}")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        resources = doc.get("resources") or [] if isinstance(doc, dict) else []
        if any((path.parent / str(r)).resolve() == base.resolve() for r in resources):
            found.append(path.parent)
    return found


def read(overlay: Path) -> dict[str, Any]:
    path = overlay / KUSTOMIZATION
    if not path.is_file():
        raise OverlayError(f"{path} does not exist; pass the overlay directory (default {DEFAULT_OVERLAY})")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != "Kustomization":
        raise OverlayError(f"{path} is not a kustomize Kustomization")
    return doc


def pins(doc: dict[str, Any]) -> dict[str, str]:
    """name → digest of the overlay's `images:` (an entry without a digest maps to '')."""
    return {str(e.get("name")): str(e.get("digest") or "") for e in doc.get("images") or [] if isinstance(e, dict)}


def placeholders(doc: dict[str, Any]) -> list[str]:
    """The names still pinned to the placeholder (or to nothing): not released yet."""
    return sorted(name for name, digest in pins(doc).items() if digest in ("", PLACEHOLDER_DIGEST))


def name_problems(overlay: Path, required: Sequence[str]) -> list[str]:
    """What `compile --check` says when the overlay's names drift from the images the install set runs by tag."""
    have = set(pins(read(overlay)))
    problems = [
        f"{overlay / KUSTOMIZATION}: the install set runs {name} by tag and the overlay does not pin it; add "
        f"`- {{digest: {PLACEHOLDER_DIGEST}, name: {name}}}` to its images: and pin it at release"
        for name in sorted(set(required) - have)
    ]
    problems += [
        f"{overlay / KUSTOMIZATION}: pins {name}, which no pod of the install set runs by tag; remove the entry"
        for name in sorted(have - set(required))
    ]
    return problems


def settings_files(overlay: Path, cfg: PipelineConfig) -> dict[Path, list[dict[str, Any]]]:
    """The controller settings of the release (`<overlay>/controller-settings/`): argo/'s, with the images the
    controllers give their pods pinned by the overlay's digests (kustomize cannot reach them: they are strings in
    upstream objects' data and env, pipelines/platform/upstream_images.py)."""
    digests = {name: digest for name, digest in pins(read(overlay)).items() if digest}
    return {overlay / name: docs for name, docs in controller_settings.render_files(cfg, digests).items()}


def parse_reference(ref: str) -> tuple[str, str]:
    """`repo@sha256:…` or `repo:tag@sha256:…` → (repo, digest); OverlayError for anything else."""
    name, at, digest = ref.partition("@")
    if not at or not _DIGEST.match(digest) or not name:
        raise OverlayError(f"{ref!r} is not REPOSITORY@sha256:<64 hex> (e.g. the output of `crane digest --full-ref`)")
    if digest == PLACEHOLDER_DIGEST:
        raise OverlayError(f"{ref!r} carries the placeholder digest; pin the digest of a pushed image")
    return image_repository(name), digest


def set_digests(overlay: Path, refs: Sequence[str]) -> dict[str, str]:
    """Write each reference's digest into the overlay's `images:` (only names it lists: a typo must not add an entry
    nobody uses); the other entries and fields stay. Returns the pins written."""
    doc = read(overlay)
    wanted = dict(parse_reference(ref) for ref in refs)
    listed = pins(doc)
    unknown = sorted(set(wanted) - set(listed))
    if unknown:
        raise OverlayError(
            f"{', '.join(unknown)} is not an image the overlay pins ({', '.join(sorted(listed)) or 'none'}); "
            f"see {overlay / KUSTOMIZATION}"
        )
    listed.update(wanted)
    doc["images"] = [{"digest": digest, "name": name} for name, digest in sorted(listed.items())]
    path = overlay / KUSTOMIZATION
    text = path.read_text(encoding="utf-8")
    header = "".join(line for line in text.splitlines(keepends=True)[: _header_length(text)])
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120), encoding="utf-8")
    return wanted


def _header_length(text: str) -> int:
    """How many leading lines are comments (kept when the file is rewritten)."""
    lines = text.splitlines()
    count = 0
    while count < len(lines) and lines[count].startswith("#"):
        count += 1
    return count
