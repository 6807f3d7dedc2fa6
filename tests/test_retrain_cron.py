"""The scheduled retrain records a commit, never a branch: the CronWorkflow asks for the branch head
(empty `git-sha`) and the build step resolves it over git's smart-HTTP protocol (git
Documentation/gitprotocol-http.txt, "Smart Clients": `info/refs?service=git-upload-pack`)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from paddle_mlops_core.config import load_config
from pipelines import retrain_cron
from steps import build_image
from steps.runtime.runner import StepError

MAIN = "3f2c1b0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
RELEASE = "0123456789abcdef0123456789abcdef01234567"


def _pkt(line: bytes) -> bytes:
    return b"%04x" % (len(line) + 4) + line


ADVERTISEMENT = b"".join(
    [
        _pkt(b"# service=git-upload-pack\n"),
        b"0000",
        _pkt(MAIN.encode() + b" HEAD\0multi_ack symref=HEAD:refs/heads/main\n"),
        _pkt(MAIN.encode() + b" refs/heads/main\n"),
        _pkt(RELEASE.encode() + b" refs/heads/release\n"),
        b"0000",
    ]
)


def _arguments(cfg=None) -> dict[str, str]:
    doc = retrain_cron.build(cfg or load_config()).to_dict()
    return {p["name"]: p.get("value") for p in doc["spec"]["workflowSpec"]["arguments"]["parameters"]}


def test_the_cron_never_passes_a_branch_name_as_the_commit() -> None:
    args = _arguments()
    assert args["git-sha"] == "" or build_image.COMMIT_RE.match(args["git-sha"])
    assert args["git-sha"] not in {args["git-branch"], *load_config().trigger.branches}
    assert args["git-sha"] == retrain_cron.RESOLVE_BRANCH_HEAD


def test_the_cron_builds_the_configured_repository_and_branch() -> None:
    cfg = load_config(overrides=["cluster.retrain_branch=release", "cluster.retrain_repository=https://git.corp/x.git"])
    args = _arguments(cfg)
    assert (args["git-branch"], args["git-repo"]) == ("release", "https://git.corp/x.git")


@pytest.fixture
def git_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/ml/repo.git/info/refs?service=git-upload-pack":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
            self.end_headers()
            self.wfile.write(ADVERTISEMENT)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ml/repo.git"
    server.shutdown()
    server.server_close()


def test_an_empty_sha_builds_the_branch_head(git_server: str) -> None:
    assert build_image.commit_to_build(git_server, "", "main") == MAIN
    assert build_image.commit_to_build(git_server, "", "release") == RELEASE
    assert build_image.commit_to_build(git_server, RELEASE, "main") == RELEASE  # a commit is kept


def test_a_branch_name_or_a_missing_branch_is_refused(git_server: str) -> None:
    with pytest.raises(StepError, match="is not a commit id"):
        build_image.commit_to_build(git_server, "main", "main")
    with pytest.raises(StepError, match="has no branch 'gone'"):
        build_image.commit_to_build(git_server, "", "gone")
    with pytest.raises(StepError, match="cannot list the branches"):
        build_image.commit_to_build(git_server + "-missing", "", "main")


def test_the_image_is_tagged_with_the_commit_and_its_signature_records_it(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_image.build_args(
        ["buildctl"], "https://g/r.git", MAIN, "Dockerfile", "reg/train", build_image.Path("m")
    )
    assert f"type=image,name=reg/train:{MAIN},push=true,rewrite-timestamp=true" in args
    # not in the image: a commit that changes nothing the image copies must build the same digest (docs/caching.md)
    assert not any("org.opencontainers.image.revision" in arg for arg in args)
    monkeypatch.setenv("COSIGN_PRIVATE_KEY", "key")
    monkeypatch.setattr(build_image.shutil, "which", lambda name: f"/usr/bin/{name}")
    sign = build_image.sign_command(f"reg/train@sha256:{'0' * 64}", MAIN)
    assert sign is not None and sign[sign.index("-a") + 1] == f"org.opencontainers.image.revision={MAIN}"


def test_every_step_after_the_build_records_the_commit_the_build_resolved() -> None:
    """An empty submitted `git-sha` must never reach MLflow tags, the model manifest or the training
    job: each train-deploy task after build-image gets build-image's `git-sha` output, and only
    build-image (which resolves it) and the exit handler read the submitted parameter."""
    from pipelines import train_deploy

    spec = train_deploy.build(load_config()).to_dict()["spec"]
    (dag,) = [t["dag"] for t in spec["templates"] if t["name"] == "main"]
    built = "{{tasks.build-image.outputs.parameters.git-sha}}"
    for task in dag["tasks"]:
        args = {p["name"]: p["value"] for p in (task.get("arguments") or {}).get("parameters", [])}
        if task["name"] in ("build-image", "prepull-image", "prepull-canary", "release-prepull"):
            # build-image resolves the commit; the pre-pull tasks run no step and record nothing.
            assert "git-sha" not in args
        else:
            assert args.get("git-sha") == built, task["name"]
    readers = {t["name"] for t in spec["templates"] if "{{workflow.parameters.git-sha}}" in str(t)}
    assert readers == {"build-image", "close-runs", "release-train-jobs"}  # the exit handler's two
    (build,) = [t for t in spec["templates"] if t["name"] == "build-image"]
    assert {"name": "git-sha", "valueFrom": {"path": "/tmp/outputs/git-sha"}} in build["outputs"]["parameters"]
