"""The production overlay (overlays/prod): the install set pinned by digest the kustomize way, rendered by the real
`kubectl kustomize` and linted as production lints it.

What kustomize does with it is read off kustomize itself (v5.5, kubectl 1.32): its images: transformer rewrites
`NAME:tag` to `NAME@digest` in the fields of api/internal/konfig/builtinpluginconsts/images.go and, through
api/filters/imagetag/legacy.go, in any `containers`/`initContainers` list; the overlay's configurations add Argo's
`container`/`script`. kustomize refuses an overlay inside its base (accumulating resources: "cycle detected"),
which is why the overlay sits beside argo/, not in it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops import pin_images, release_overlay
from paddle_mlops.compile import check, default_compile_config, render_all
from paddle_mlops.lint.findings import lint_paths
from paddle_mlops_core.config.loader import load_config
from paddle_mlops_core.contracts import PLACEHOLDER_DIGEST

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "overlays" / "prod"
KUBECTL = shutil.which("kubectl")


def kubectl() -> str:
    """A kubectl whose kustomize renders the overlay (v4+: directories as resources, field-spec configurations).
    Debian bookworm's kubernetes-client is kubectl 1.20 with kustomize v2.0.3, which can do neither."""
    if KUBECTL is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is not installed; .ci/run installs Debian's kubernetes-client package")
        pytest.skip("kubectl is not installed (apt-get install kubernetes-client); CI=true makes this a failure")
    version = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"Kustomize Version: v(\d+)", version)
    if found is None or int(found.group(1)) < 4:
        pytest.fail(f"{KUBECTL} bundles a kustomize older than v4 ({version.strip()}); install kubectl 1.21 or newer")
    return KUBECTL


def kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def fake_digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


@pytest.fixture()
def released(tmp_path: Path) -> Path:
    """A copy of argo/ and the overlay, its digests filled the way a release fills them (`paddle-mlops pin-images`)."""
    shutil.copytree(ROOT / "argo", tmp_path / "argo")
    shutil.copytree(OVERLAY, tmp_path / "overlays" / "prod")
    overlay = tmp_path / "overlays" / "prod"
    names = release_overlay.pins(release_overlay.read(overlay))
    assert pin_images.main(["--overlay", str(overlay), *(f"{n}@{fake_digest(n)}" for n in names)]) == 0
    return overlay


def lint_rendered(overlay: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`kubectl kustomize OVERLAY > rendered.yaml; paddle-mlops lint --env prod rendered.yaml`, run from the root the
    overlay sits in (lint reads the environment's controller settings from overlays/prod/controller-settings/)."""
    root = overlay.parent.parent
    rendered = root / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(kustomize(overlay)))
    monkeypatch.chdir(root)
    return lint_paths([rendered], env="prod")


CONTROLLER_IMAGES = {
    "quay.io/argoproj/argoexec",  # init/wait of every workflow pod (the workflow controller's executor)
    "quay.io/argoproj/argo-events",  # EventSource and Sensor pods (the Argo Events controller's ARGO_EVENTS_IMAGE)
    "nats",  # the EventBus pods' containers (the controller config's jetstream version)
    "natsio/prometheus-nats-exporter",
    "natsio/nats-server-config-reloader",
}


def test_the_released_overlay_renders_and_lints_clean_for_prod(released: Path, monkeypatch) -> None:
    """0 findings with the controllers' own containers counted: lint models argoexec, Argo Events and NATS with the
    images the released controller settings give them, by the release's digests."""
    assert lint_rendered(released, monkeypatch) == []
    docs = kustomize(released)
    images = {c["image"] for d in docs for c in _containers(d)}
    for name in set(release_overlay.pins(release_overlay.read(released))) - CONTROLLER_IMAGES:
        assert f"{name}@{fake_digest(name)}" in images, name
    assert not [i for i in images if "@" not in i], "an image still runs by tag"
    text = "".join(p.read_text() for p in sorted((released / "controller-settings").glob("*.yaml")))
    for name in CONTROLLER_IMAGES:
        assert f"{name}@{fake_digest(name)}" in text, name


def test_a_tag_in_a_pod_a_controller_adds_is_found(released: Path, monkeypatch) -> None:
    """Fails on a lint that models the controllers' containers without their images: with argo/'s settings (tags) in
    place of the release's, the rendered overlay is clean of tags in our manifests, yet every workflow pod's
    init/wait, every EventSource/Sensor pod and the EventBus pods would run upstream images by tag."""
    shutil.rmtree(released / "controller-settings")
    findings = lint_rendered(released, monkeypatch)
    tagged = {f.message.split()[1].rsplit(":", 1)[0] for f in findings if f.rule == "image-digest"}
    assert tagged == CONTROLLER_IMAGES
    assert any(f.container.endswith("/wait") for f in findings)  # an executor container Argo adds
    assert any(f.document.startswith("EventBus/") for f in findings)


def test_the_base_renders_and_holds_every_generated_document() -> None:
    """Everything but the controller settings, which are patched into upstream objects, never applied with -k."""
    docs = kustomize(ROOT / "argo")
    files = render_all(default_compile_config())
    generated = [d for name, ds in files.items() if not name.startswith("controller-settings/") for d in ds]
    key = lambda d: (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, docs)) == sorted(map(key, generated))
    settings = {key(d) for name, ds in files.items() if name.startswith("controller-settings/") for d in ds}
    assert settings and not settings & set(map(key, docs))


def test_the_checked_in_overlay_is_reported_as_not_released(tmp_path: Path, monkeypatch) -> None:
    """Before a release every digest is the placeholder: lint says so for every image it pins, the controllers' own
    included, never 'pinned'."""
    doc = release_overlay.read(OVERLAY)
    assert release_overlay.placeholders(doc) == sorted(release_overlay.pins(doc))
    shutil.copytree(ROOT / "argo", tmp_path / "argo")
    shutil.copytree(OVERLAY, tmp_path / "overlays" / "prod")
    findings = lint_rendered(tmp_path / "overlays" / "prod", monkeypatch)
    assert findings and all(f.rule == "image-digest" and "placeholder digest" in f.message for f in findings)
    assert {f.message.split()[1].split("@")[0] for f in findings} == set(release_overlay.pins(doc))


def test_prod_requires_digests_and_names_the_overlay() -> None:
    images = load_config(env="prod").images
    assert images.require_digest and (ROOT / images.digest_overlay / "kustomization.yaml").is_file()
    assert (ROOT / images.digest_overlay).resolve() == OVERLAY


def test_the_overlay_pins_exactly_what_the_install_set_runs_by_tag(tmp_path: Path) -> None:
    """The names are generated data: compile --check fails when they drift from argo/ (the digests do not count)."""
    cfg = default_compile_config()
    required = release_overlay.unpinned_repositories(d for ds in render_all(cfg).values() for d in ds)
    assert sorted(release_overlay.pins(release_overlay.read(OVERLAY))) == required
    assert check(ROOT / "argo", cfg) == []
    shutil.copytree(ROOT / "argo", tmp_path / "argo")
    shutil.copytree(OVERLAY, tmp_path / "overlays" / "prod")
    path = tmp_path / "overlays" / "prod" / "kustomization.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["images"] = [e for e in doc["images"] if not e["name"].endswith("/tools")]
    path.write_text(yaml.safe_dump(doc))
    (problem,) = check(tmp_path / "argo", cfg)
    assert "runs registry.example.com/paddle-mlops/tools by tag and the overlay does not pin it" in problem


def test_pin_images_writes_what_kustomize_edit_set_image_writes(released: Path) -> None:
    """kustomize/commands/edit/set/setimage.go: `- digest: …` / `name: …` entries, sorted by name; a reference of
    an image the overlay does not list, a malformed digest or the placeholder is refused (exit 2), nothing written."""
    text = (released / "kustomization.yaml").read_text()
    assert text.startswith("# Production")  # the header comments stay
    entries = yaml.safe_load(text)["images"]
    assert [list(e) for e in entries] == [["digest", "name"]] * len(entries)
    assert [e["name"] for e in entries] == sorted(e["name"] for e in entries)
    for bad in ("foo/bar@" + fake_digest("x"), "registry.example.com/paddle-mlops/tools:0.1.0", "x@sha256:abc"):
        assert pin_images.main(["--overlay", str(released), bad]) == 2
    placeholder = f"registry.example.com/paddle-mlops/tools@{PLACEHOLDER_DIGEST}"
    assert pin_images.main(["--overlay", str(released), placeholder]) == 2
    assert (released / "kustomization.yaml").read_text() == text


def test_lint_of_the_checkout_stays_clean_and_prod_lints_the_overlay_not_the_tags() -> None:
    """`make lint` runs `paddle-mlops lint argo/` (the overlay's files hold no pods)."""
    assert lint_paths([ROOT / "argo", OVERLAY]) == []
    assert {f.rule for f in lint_paths([ROOT / "argo"], env="prod")} == {"image-digest"}


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("image"), str):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found
