"""The images' Dockerfiles: pinned bases, a non-root final user, an entry point, Paddle from the lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ("train", "tools", "serve", "mlflow")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and heredoc bodies (`<<EOF` … `EOF`) consumed."""
    out: list[Instruction] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            nxt = lines[i].strip()
            i += 1
            if nxt.startswith("#"):
                continue  # comments inside a continued instruction are dropped by BuildKit
            line = line[:-1].rstrip() + " " + nxt
        for marker in re.findall(r"<<-?['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?", line):
            while i < len(lines) and lines[i].strip() != marker:
                i += 1
            i += 1
        keyword, _, args = line.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start + 1))
    return out


def image_pinned(ref: str) -> bool:
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    return bool(digest.startswith("sha256:")) or (tag is not None and tag != "latest")


def _from_image(args: str) -> tuple[str, str | None]:
    parts = [p for p in args.split() if not p.startswith("--platform")]
    stage = parts[2].lower() if len(parts) >= 3 and parts[1].upper() == "AS" else None
    return parts[0], stage


def dockerfile(name: str) -> list[Instruction]:
    path = ROOT / "images" / name / "Dockerfile"
    if not path.is_file():
        pytest.skip(f"{path} not written yet")
    return parse_dockerfile(path.read_text(encoding="utf-8"))


def test_parser_joins_continuations_and_skips_heredocs():
    text = "FROM a:1 AS x\nRUN echo 1 \\\n    # note\n && echo 2\nRUN python - <<'PY' > f\nUSER root\nPY\nUSER 1000\n"
    parsed = parse_dockerfile(text)
    assert [(i.keyword, i.args) for i in parsed] == [
        ("FROM", "a:1 AS x"),
        ("RUN", "echo 1 && echo 2"),
        ("RUN", "python - <<'PY' > f"),
        ("USER", "1000"),
    ]


@pytest.mark.parametrize(
    "ref,ok",
    [
        ("a/b:1.2", True),
        ("a/b:latest", False),
        ("a/b", False),
        ("host:5000/b", False),
        ("a/b@sha256:" + "0" * 64, True),
    ],
)
def test_image_pinned(ref, ok):
    assert image_pinned(ref) is ok


@pytest.mark.parametrize("name", IMAGES)
def test_every_base_image_is_pinned(name):
    stages: set[str] = set()
    for ins in dockerfile(name):
        if ins.keyword == "FROM":
            image, stage = _from_image(ins.args)
            assert image.lower() in stages or image_pinned(image), (
                f"images/{name}/Dockerfile:{ins.line}: FROM {image} is not pinned"
            )
            if stage:
                stages.add(stage)
        elif ins.keyword in ("COPY", "ADD"):
            source = re.search(r"--from=(\S+)", ins.args)
            if source and source.group(1).lower() not in stages and not source.group(1).isdigit():
                assert image_pinned(source.group(1)), (
                    f"images/{name}/Dockerfile:{ins.line}: --from={source.group(1)} is not pinned"
                )


@pytest.mark.parametrize("name", IMAGES)
def test_final_stage_runs_as_non_root_user(name):
    instructions = dockerfile(name)
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    users = [ins.args for ins in instructions[last_from:] if ins.keyword == "USER"]
    assert users, f"images/{name}/Dockerfile: the final stage sets no USER (it would run as root)"
    user = users[-1].split(":", 1)[0]
    assert user not in ("root", "0"), f"images/{name}/Dockerfile: the last USER is {users[-1]}"


@pytest.mark.parametrize("name", IMAGES)
def test_has_an_entry_point(name):
    keywords = {ins.keyword for ins in dockerfile(name)}
    assert keywords & {"ENTRYPOINT", "CMD"}, f"images/{name}/Dockerfile has neither ENTRYPOINT nor CMD"


def _locked_version(package: str) -> str:
    lock = (ROOT / "uv.lock").read_text(encoding="utf-8")
    (version,) = set(re.findall(rf'^name = "{re.escape(package)}"\nversion = "([^"]+)"', lock, re.MULTILINE))
    return version


def test_train_image_uses_the_locked_paddle_gpu_build_and_keeps_it():
    instructions = dockerfile("train")
    final_from = [ins for ins in instructions if ins.keyword == "FROM"][-1]
    image, _ = _from_image(final_from.args)
    repo, tag = image.split(":", 1)
    assert repo == "paddlepaddle/paddle"
    assert tag.startswith(_locked_version("paddlepaddle") + "-gpu-")
    runs = " ".join(ins.args for ins in instructions if ins.keyword == "RUN")
    # The exported lock leaves paddlepaddle out and pip resolves nothing that could bring it back.
    assert "--no-emit-package paddlepaddle" in runs
    assert "--no-deps" in runs
    for ins in instructions:
        if ins.keyword == "RUN":
            for command in re.split(r"&&|;", ins.args):
                assert not ("pip install" in command and re.search(r"\bpaddlepaddle\b", command)), command


@pytest.mark.parametrize("name", ["tools", "serve"])
def test_image_installs_the_lock_with_hashes(name: str) -> None:
    """The serving image is served by digest from build-image: it must hold the set the tests ran against."""
    runs = " ".join(ins.args for ins in dockerfile(name) if ins.keyword == "RUN")
    assert "uv export --frozen --no-dev" in runs
    assert "--require-hashes" in runs
    # tools wants the lock's CPU wheel; serve keeps its Paddle base image's build
    assert ("--no-emit-package paddlepaddle" in runs) is (name == "serve")


def _mlflow_image_pins() -> dict[str, str]:
    """{canonical distribution name: version} of the `==` pins images/mlflow/Dockerfile installs."""
    from packaging.utils import canonicalize_name

    text = (ROOT / "images" / "mlflow" / "Dockerfile").read_text(encoding="utf-8")
    return {canonicalize_name(n): v for n, v in re.findall(r"([A-Za-z0-9_.-]+)(?:\[[\w,]*\])?==([\w.]+)", text)}


def _requirement_closure(roots: set[str]) -> set[str]:
    """The installed distributions `roots` need, transitively (extras left out, markers evaluated here)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_mlflow_image_installs_the_artifact_repository_and_what_it_imports():
    """The tracking server reads registry versions through the project's artifact repository (published-s3://...),
    so images/mlflow installs the project for its entry points, without dependencies and without Paddle. What the
    repository imports must then come from the image: MLflow's own requirements (ghcr.io/mlflow/mlflow is
    `pip install mlflow==$VERSION`, mlflow/mlflow docker/Dockerfile) or a pin of the Dockerfile,
    at uv.lock's version."""
    import json
    import subprocess
    import sys
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    runs = " ".join(ins.args for ins in dockerfile("mlflow") if ins.keyword == "RUN")
    assert "pip install --no-cache-dir --no-deps /opt/paddle-mlops" in runs and "SCHEMES" in runs
    copied = {ins.args.split()[0] for ins in dockerfile("mlflow") if ins.keyword == "COPY"}
    assert copied == {"pyproject.toml", "paddle_mlops_core", "steps"}
    pins = _mlflow_image_pins()
    for name, version in pins.items():
        if f'name = "{name}"' in (ROOT / "uv.lock").read_text(encoding="utf-8"):
            assert _locked_version(name) == version, f"images/mlflow/Dockerfile pins {name}=={version}, uv.lock another"

    def imported(code: str) -> set[str]:
        line = f"import json, sys; {code}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
        done = subprocess.run([sys.executable, "-W", "ignore", "-c", line], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        return set(json.loads(done.stdout.strip().splitlines()[-1]))

    # What MLflow imports by itself (with the project hidden, so its entry points load nothing of ours) is the image's.
    plugin = imported("import steps.runtime.storage.objectstore.mlflow_repository")
    assert not plugin & {"paddle", "paddlenlp", "hera", "kserve"}
    modules = plugin - imported("sys.modules['steps'] = None; import mlflow")
    owners = packages_distributions()
    needed = {canonicalize_name(d) for m in modules for d in owners.get(m, [])} - {"paddle-mlops"}
    available = _requirement_closure({"mlflow", *pins})
    assert needed <= available, f"images/mlflow/Dockerfile lacks {sorted(needed - available)}: pin them there"
