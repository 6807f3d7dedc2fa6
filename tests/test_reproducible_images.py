"""A commit that changes nothing an image copies builds the same image digest, so the step cache reuses training.

What makes a BuildKit image reproducible (moby/buildkit v0.32.2 docs/build-repro.md; exporter/containerimage/exptypes/
keys.go `rewrite-timestamp`, present since v0.13, below the matrix's BuildKit minimum v0.20): the image config's
`created` and history times come from the SOURCE_DATE_EPOCH build arg, and with the image exporter's
`rewrite-timestamp=true` so do the times of every file in the layers. The content is then the Dockerfile's inputs:
the base images, the locked packages, and the files COPY takes from the commit. So the images built per commit
(training, serving) copy the code and the lock only, take no commit-specific build arg or label, and build-image
passes a fixed epoch. The train step's content key on the cluster is the training image's digest
(steps/train_cache.py): a README-only push therefore finds the model the previous push trained.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from paddle_mlops_core.config import load_config
from steps import build_image, train_cache
from steps.runtime.caching.store import StepCache
from steps.runtime.storage import s3
from tests.conftest import PROJECT_ROOT
from tests.s3server import moto_s3_server
from tests.test_dockerfiles import dockerfile

PER_COMMIT_IMAGES = ("train", "serve")
# What those images may copy from the build context: the code the steps run and the lock.
CODE = {"uv.lock", "pyproject.toml", "paddle_mlops_core", "paddle_mlops", "pipelines", "steps", "configs"}
DIGEST = "sha256:" + "a" * 64


def context_copies(name: str) -> set[str]:
    """The build-context paths the final stage of images/<name>/Dockerfile copies (COPY --from=stage excluded)."""
    found: set[str] = set()
    for instruction in dockerfile(name):
        if instruction.keyword == "COPY" and "--from=" not in instruction.args:
            found.update(instruction.args.split()[:-1])
    return found


@pytest.mark.parametrize("name", PER_COMMIT_IMAGES)
def test_an_image_built_per_commit_copies_only_code_and_takes_the_epoch(name: str) -> None:
    assert context_copies(name) <= CODE, f"images/{name}/Dockerfile copies {context_copies(name) - CODE}"
    instructions = dockerfile(name)
    keywords = [(i.keyword, i.args) for i in instructions]
    final = max(i for i, (k, _) in enumerate(keywords) if k == "FROM")
    arg = keywords.index(("ARG", "SOURCE_DATE_EPOCH"))
    first_install = next(i for i, (k, a) in enumerate(keywords) if k == "RUN" and "pip install" in a and i > final)
    # pip byte-compiles hash-checked .pyc files only when SOURCE_DATE_EPOCH is in its environment (PEP 552)
    assert final < arg < first_install
    assert not any(k == "LABEL" for k, _ in keywords[final:])


def test_the_build_pins_time_and_leaves_the_commit_out_of_the_image() -> None:
    args = build_image.build_args(["buildctl"], "https://g/r.git", "c" * 40, "f", "reg/train", Path("m"))
    assert f"build-arg:SOURCE_DATE_EPOCH={build_image.SOURCE_DATE_EPOCH}" in args
    output = args[args.index("--output") + 1]
    assert "rewrite-timestamp=true" in output.split(",")
    # the commit names the context and the tag only; no build arg or label carries it into the image
    opts = [args[i + 1] for i, a in enumerate(args) if a == "--opt"]
    assert [o for o in opts if "c" * 40 in o] == [f"context=https://g/r.git#{'c' * 40}"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository of the project's code and images, with one commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for path in [*CODE, "images", "README.md"]:
        source = PROJECT_ROOT / path
        if source.is_dir():
            shutil.copytree(source, repo / path, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, repo / path)
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return repo


def image_inputs(repo: Path, commit: str, name: str) -> dict[str, str]:
    """What a build of images/<name>/Dockerfile at `commit` reads from the commit: git object ids of its sources."""
    return {path: _git(repo, "rev-parse", f"{commit}:{path}") for path in [*context_copies(name), f"images/{name}"]}


@pytest.mark.slow
def test_a_readme_only_commit_reuses_the_training_of_the_commit_before(repo: Path, tmp_path: Path) -> None:
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("# a better README\n", encoding="utf-8")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "docs only")
    second = _git(repo, "rev-parse", "HEAD")
    assert first != second
    for name in PER_COMMIT_IMAGES:  # the same inputs at both commits: BuildKit builds the same digest
        assert image_inputs(repo, first, name) == image_inputs(repo, second, name)

    # The first push trained and recorded its model under the key of the image digest; the second looks it up.
    cfg = load_config(PROJECT_ROOT / "configs" / "pipeline.yaml", "prod")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(json.dumps({"text": "好", "label": 1}) + "\n", encoding="utf-8")
    model = tmp_path / "model"
    model.mkdir()
    (model / "inference.pdiparams").write_bytes(b"weights")
    with moto_s3_server() as endpoint:
        s3.client(endpoint).create_bucket(Bucket="step-cache")
        cache = StepCache("s3://step-cache/prod", endpoint)
        recorded = cache.record(train_cache.train_key(cfg, data, DIGEST), {"model": model}, {}, "train-deploy-first")
        assert recorded is not None
        found = cache.lookup(train_cache.train_key(cfg, data, DIGEST))
        assert found is not None and found.run == "train-deploy-first"
        # another image (code that changed) is another key
        assert cache.lookup(train_cache.train_key(cfg, data, "sha256:" + "b" * 64)) is None
