"""Build and push the training and serving images with rootless BuildKit, sign them, output their digests.

On the cluster the step runs in the tools image against a `BUILDKIT_HOST` daemon (or
`buildctl-daemonless.sh`). The build context is the git repository at the exact commit, so the
image is reproducible from `--git-sha` alone; an empty `--git-sha` (the scheduled retrain, which has
no push) means the head commit of `--git-branch`, resolved once here, built, labelled and output as
the `git-sha` output, so no branch name is ever recorded as the commit. Both images are built from that
commit by the same daemon one after the other, so the second reuses every layer the first built (the
Dockerfiles share their base layers through BuildKit's cache). When `COSIGN_PRIVATE_KEY` is set (from a
Secret), each pushed digest is signed before it is output, so later steps only ever see signed images (the
Kyverno policy in argo/policies.yaml refuses unsigned ones): the train image's digest pins the training job,
the serve image's digest every InferenceService. Locally there is no BuildKit: the local executor runs the
installed project, so the step says so and outputs the digest `local` for both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import runner
from steps.runtime.runner import StepError, StepFailed

LOCAL_DIGEST = "local"
# A full SHA-1 or SHA-256 object name: BuildKit's git source takes only those as a commit (anything
# shorter is looked up as a ref name and the build fails late), and a branch name never is one.
COMMIT_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
REVISION_LABEL = "org.opencontainers.image.revision"
# The images' created time and every file time in them (0: the Unix epoch): fixed, so the digest is the inputs'.
SOURCE_DATE_EPOCH = 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--git-repo", required=True, help="git URL of the repository to build")
    parser.add_argument("--image", required=True, help="training image without tag; pushed as <image>:<git-sha>")
    parser.add_argument("--dockerfile", default="images/train/Dockerfile", help="its Dockerfile inside the repo")
    parser.add_argument("--serve-image", required=True, help="serving image without tag; pushed as <image>:<git-sha>")
    parser.add_argument("--serve-dockerfile", default="images/serve/Dockerfile", help="its Dockerfile inside the repo")
    parser.add_argument("--git-branch", default="main", help="branch whose head is built when --git-sha is empty")


def buildctl_command() -> list[str] | None:
    """`buildctl-daemonless.sh` (rootless, starts its own daemon) or `buildctl` against BUILDKIT_HOST."""
    daemonless = shutil.which("buildctl-daemonless.sh")
    if daemonless:
        return [daemonless]
    if os.environ.get("BUILDKIT_HOST") and shutil.which("buildctl"):
        command = [shutil.which("buildctl") or "buildctl"]
        tls = os.environ.get("BUILDKIT_TLS_DIR")
        if tls:  # mutual TLS to the shared daemon (argo/buildkit.yaml)
            command += [f"--tlscacert={tls}/ca.crt", f"--tlscert={tls}/tls.crt", f"--tlskey={tls}/tls.key"]
        return command
    return None


def _pkt_lines(body: bytes) -> Sequence[bytes]:
    """The pkt-line payloads of a git smart-HTTP reply (flush packets dropped)."""
    lines, pos = [], 0
    while pos + 4 <= len(body):
        size = int(body[pos : pos + 4], 16)
        if size == 0:
            pos += 4
            continue
        lines.append(body[pos + 4 : pos + size])
        pos += size
    return lines


def resolve_branch(git_repo: str, branch: str, timeout: float = 30.0) -> str:
    """`git ls-remote <repo> refs/heads/<branch>` over smart HTTP, without a git binary: the commit."""
    url = f"{git_repo.rstrip('/')}/info/refs?service=git-upload-pack"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 (an https/http git URL)
            body = reply.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise StepError(
            f"cannot list the branches of {git_repo} ({exc}); pass --git-sha <commit> or make the repository "
            "readable over https (cluster.retrain_repository)"
        ) from None
    ref = f"refs/heads/{branch}".encode()
    for line in _pkt_lines(body):
        sha, _, rest = line.partition(b" ")
        if rest.split(b"\0", 1)[0].rstrip(b"\n") == ref and COMMIT_RE.match(sha.decode("ascii", "replace")):
            return sha.decode()
    raise StepError(f"{git_repo} has no branch {branch!r}; set cluster.retrain_branch to an existing branch")


def commit_to_build(git_repo: str, git_sha: str, branch: str) -> str:
    """The commit to build: `git_sha` when it is one, the branch head when it is empty."""
    if git_sha == "":
        return resolve_branch(git_repo, branch)
    if not COMMIT_RE.match(git_sha):
        raise StepError(
            f"--git-sha {git_sha!r} is not a commit id; pass the full commit being built, or an empty "
            "--git-sha with --git-branch to build the branch head"
        )
    return git_sha


def build_args(
    buildctl: list[str], git_repo: str, git_sha: str, dockerfile: str, image: str, metadata: Path
) -> list[str]:
    return [
        *buildctl,
        "build",
        "--frontend",
        "dockerfile.v0",
        "--opt",
        f"context={git_repo}#{git_sha}",
        "--opt",
        f"filename={dockerfile}",
        # Reproducible (moby/buildkit docs/build-repro.md): a fixed SOURCE_DATE_EPOCH is the image's created time
        # and, with rewrite-timestamp, every file's time in its layers. No commit goes into the image itself (the
        # tag names it, the signature records it): a commit that changes nothing the Dockerfile copies builds the
        # same digest, and the step cache reuses what was trained on it (docs/caching.md).
        "--opt",
        f"build-arg:SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}",
        "--output",
        f"type=image,name={image}:{git_sha},push=true,rewrite-timestamp=true",
        "--metadata-file",
        str(metadata),
    ]


def sign_command(image_ref: str, commit: str | None = None) -> list[str] | None:
    """Keyed cosign signing of `image@digest` when a signing key is provided; None when it is not. The signature
    carries the `commit` built (an image built again from a later commit with the same inputs gets one more)."""
    if not os.environ.get("COSIGN_PRIVATE_KEY"):
        return None
    cosign = shutil.which("cosign")
    if cosign is None:
        raise StepError("COSIGN_PRIVATE_KEY is set but cosign is not on PATH; run the step in the tools image")
    # --yes: no interactive prompt; --tlog-upload=false: an air-gapped cluster has no Rekor.
    annotations = ["-a", f"{REVISION_LABEL}={commit}"] if commit else []
    return [cosign, "sign", "--yes", "--tlog-upload=false", "--key", "env://COSIGN_PRIVATE_KEY", *annotations,
            image_ref]  # fmt: skip


def read_digest(metadata: Path) -> str:
    try:
        digest = json.loads(metadata.read_text(encoding="utf-8"))["containerimage.digest"]
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise StepError(
            f"BuildKit metadata {metadata} has no containerimage.digest ({exc}); see the build log above"
        ) from None
    if not str(digest).startswith("sha256:"):
        raise StepError(f"BuildKit reported an unexpected digest {digest!r}")
    return str(digest)


def build_and_sign(buildctl: list[str], git_repo: str, commit: str, dockerfile: str, image: str) -> str:
    """Build `dockerfile` at `commit`, push `image:<commit>`, sign `image@digest`; return the digest."""
    metadata = Path(tempfile.mkdtemp(prefix="build-")) / "build-meta.json"
    runner.log.info("building %s:%s from %s#%s (%s)", image, commit, git_repo, commit, dockerfile)
    result = subprocess.run(build_args(buildctl, git_repo, commit, dockerfile, image, metadata), check=False)
    if result.returncode != 0:
        raise StepFailed(f"buildctl failed for {image} with exit code {result.returncode}; see the build log above")
    digest = read_digest(metadata)
    reference = f"{image}@{digest}"
    sign = sign_command(reference, commit)
    if sign is None:
        runner.log.warning("%s is not signed (no COSIGN_PRIVATE_KEY); admission policies will refuse it", reference)
    elif subprocess.run(sign, check=False).returncode != 0:
        raise StepFailed(f"cosign could not sign {reference}; no digest is output")
    else:
        print(f"build-image: signed {reference}")
    print(f"build-image: pushed {image}:{commit}@{digest}")
    return digest


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    del cfg  # loaded only to refuse a bad configuration before anything is built
    buildctl = buildctl_command()
    if buildctl is None:
        print(
            "build-image: skipped — no BuildKit here (local run uses the installed project); image digests: "
            f"{LOCAL_DIGEST}"
        )
        return {"image-digest": LOCAL_DIGEST, "serve-image-digest": LOCAL_DIGEST, "git-sha": args.git_sha}
    commit = commit_to_build(args.git_repo, args.git_sha, args.git_branch)
    train = build_and_sign(buildctl, args.git_repo, commit, args.dockerfile, args.image)
    serve = build_and_sign(buildctl, args.git_repo, commit, args.serve_dockerfile, args.serve_image)
    return {"image-digest": train, "serve-image-digest": serve, "git-sha": commit}


STEP = runner.Step(
    "build-image",
    __doc__,
    run,
    _arguments,
    outputs=(
        runner.Output("image-digest", "the pushed training image's digest"),
        runner.Output("serve-image-digest", "the pushed serving image's digest"),
        runner.Output("git-sha", "the commit that was built"),
    ),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
