"""Write the MLflow model files into an export directory, at its root, so the published version IS an MLflow model.

`write(model_dir, instances)` adds `MLmodel`, `requirements.txt`, `python_env.yaml`, `conda.yaml`,
`input_example.json`, `serving_input_example.json` and `code/` next to the export (evaluate calls it after the
engine selection, so `engine.json` is there). `MLmodel` has two flavours:
- `python_function` with `loader_module: steps.runtime.serving.mlflow_flavor` and no `data`: MLflow calls
  `_load_pyfunc(<model dir>)`, which answers as the model server does (one implementation: `ExportedModel`);
- `paddle`, as mlflow/paddle/__init__.py writes and reads it (`pickled_model: inference`): `mlflow.paddle.load_model`
  gives the `paddle.jit.load` layer of the export.

The files are written by `mlflow.pyfunc.save_model` into a temporary directory and moved in (MLflow writes only
into an empty directory), all but the uv project files MLflow copies from the working directory (the whole dev
lock, which changes with every unrelated dependency). The signature and input example are inferred from a few real
rows (the caller's, from the test split) and the model's own answers to them. `MLmodel`'s uuid and creation time are
the export's digest and a fixed time, so writing again over the same export writes the same bytes (a re-publish
sends nothing).

`code/` bundles the project modules the loader module imports (its import closure, as steps/runtime/caching/keys.py
computes it for the step cache): the project is no PyPI package, and without them the model would load only in a
checkout of this repository, not in a fresh environment holding just `requirements.txt`. The price is that those
files change when that code changes; evaluate's cache key already covers the same closure (this module is part of
evaluate's code), so a code change that moves them also reruns the engine selection, whose `engine.json` makes it a
new version anyway, and the content-addressed store uploads only the changed files.

`requirements.txt` pins, at the installed (uv.lock's) versions, what loading and predicting import: the
distributions the closure imports at module level, `mlflow`, and the engine runtimes (onnxruntime, openvino) only
when the export's `engine.json` ranks a variant that needs them.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
import paddle
import pandas as pd
from mlflow.models import Model, ModelSignature, infer_signature
from mlflow.types.schema import Array, ColSpec, Object, Property, Schema

from paddle_mlops_core.config.tasks import TOKEN_CLASSIFICATION
from paddle_mlops_core.contracts import ENGINE_FILE, MLFLOW_CODE_DIR, MLFLOW_MODEL_FILES
from steps.runtime.caching import keys
from steps.runtime.serving import mlflow_flavor
from steps.runtime.serving.engines.variants import SPECS
from steps.runtime.weights.ernie import engine_record

LOADER_MODULE = "steps.runtime.serving.mlflow_flavor"
CODE_DIR = MLFLOW_CODE_DIR
FILES = MLFLOW_MODEL_FILES  # left out of evaluate's cache key (steps/evaluate.py)
EXAMPLE_ROWS = 3
# A fixed creation time (2000-01-01T00:00:00Z): MLmodel's bytes depend on the export only.
CREATED = 946684800.0
UV_FILES = "MLFLOW_LOG_UV_FILES"
# Imported by the closure's modules but not when a model is loaded and run: building engines, preparing data.
ENGINE_PACKAGES = {"onnxruntime": "onnxruntime", "openvino": "openvino"}


def write(model_dir: Path, instances: Sequence[Any]) -> list[str]:
    """Write the MLflow model files into `model_dir` (an export) from `instances` (V1 instances of real rows: texts
    or pairs); the top-level names written."""
    model_dir = Path(model_dir)
    for name in FILES:
        _remove(model_dir / name)
    wrapper = mlflow_flavor._load_pyfunc(model_dir)
    example = wrapper.frame(list(instances)[:EXAMPLE_ROWS])
    answers = wrapper.predict(example)
    model = Model(
        utc_time_created=CREATED,
        model_uuid=uuid.UUID(bytes=hashlib.sha256(keys.dir_digest(model_dir).encode()).digest()[:16]).hex,
        metadata={"task": wrapper.model.task_type, "engine": wrapper.model.engine_name},
    )
    with tempfile.TemporaryDirectory(prefix="mlflow-model-") as tmp, _saving():
        staged = Path(tmp) / "model"
        mlflow.pyfunc.save_model(
            str(staged),
            loader_module=LOADER_MODULE,
            code_paths=[str(p) for p in _code_tree(Path(tmp) / "src")],
            mlflow_model=model,
            signature=signature(wrapper.model.task_type, example, answers),
            input_example=example,
            pip_requirements=requirements(model_dir),
        )
        model.add_flavor("paddle", pickled_model="inference", paddle_version=paddle.__version__, code=CODE_DIR)
        model.model_size_bytes = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
        model.save(str(staged / "MLmodel"))
        for name in FILES:
            if (staged / name).exists():
                shutil.move(str(staged / name), str(model_dir / name))
    return sorted(name for name in FILES if (model_dir / name).exists())


@contextmanager
def _saving() -> Iterator[None]:
    """Around `save_model`: no uv project files (MLflow copies the checkout's uv.lock and pyproject.toml, about
    470 KB, by default: mlflow/utils/uv_utils.py; `FILES` leaves them behind anyway)."""
    before = os.environ.get(UV_FILES)
    os.environ[UV_FILES] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(UV_FILES, None)
        else:
            os.environ[UV_FILES] = before


# An entity of a token-classification answer (steps/runtime/serving/model_server/shapes.py): what the signature
# says `entities` holds when the example rows' answers found none to infer it from.
ENTITY = Object([Property("type", "string"), Property("text", "string"), Property("start", "long"),
                 Property("end", "long"), Property("score", "double")])  # fmt: skip


def signature(task_type: str, example: pd.DataFrame, answers: pd.DataFrame) -> ModelSignature:
    """The signature MLflow infers from the example rows and the model's answers to them."""
    inferred = infer_signature(example, answers)
    if task_type == TOKEN_CLASSIFICATION and not any(len(e) for e in answers["entities"]):
        inferred.outputs = Schema([ColSpec(Array(ENTITY), "entities")])
    return inferred


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _code_tree(root: Path) -> list[Path]:
    """The loader module's import closure copied under `root`, one folder per top-level package (MLflow copies each
    code path into `code/` under its own name)."""
    for path in keys.module_closure(LOADER_MODULE):
        target = root / path.relative_to(keys.PROJECT_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return sorted(root.iterdir())


def module_imports(path: Path) -> set[str]:
    """The top-level names a module imports when it is imported (module-level statements, not function bodies)."""
    names: set[str] = set()
    todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, (ast.If, ast.Try)):
            todo += [*node.body, *node.orelse, *getattr(node, "handlers", []), *getattr(node, "finalbody", [])]
        elif isinstance(node, ast.ExceptHandler):
            todo += node.body
    return names


def requirements(model_dir: Path) -> list[str]:
    """`name==version` of the installed distributions the loader's closure imports at module level, mlflow, and the
    engine runtimes the export's ranking needs."""
    imported = {name for path in keys.module_closure(LOADER_MODULE) for name in module_imports(path)}
    ranking = engine_record(model_dir).get("ranking", []) if (model_dir / ENGINE_FILE).is_file() else []
    imported |= {
        ENGINE_PACKAGES[SPECS[v].engine] for v in ranking if SPECS.get(v) and SPECS[v].engine in ENGINE_PACKAGES
    }
    imported.add("mlflow")
    names = sorted(imported - set(sys.stdlib_module_names) - set(keys.PROJECT_PACKAGES))
    return sorted(f"{dist}=={metadata.version(dist)}" for name in names for dist in _distributions(name))


def _distributions(module: str) -> list[str]:
    """The installed distributions that provide top-level `module`: the one named after it (numpy, mlflow — not the
    mlflow-skinny and mlflow-tracing that share its namespace), else those whose `top_level.txt` names it (paddle:
    paddlepaddle, yaml: PyYAML), else any whose files hold it (`packages_distributions`, which reads every RECORD:
    slow, so last)."""
    try:
        return [metadata.distribution(module).metadata["Name"]]
    except metadata.PackageNotFoundError:
        pass
    found = [
        d.metadata["Name"] for d in metadata.distributions() if module in (d.read_text("top_level.txt") or "").split()
    ]
    return found or metadata.packages_distributions().get(module, [])
