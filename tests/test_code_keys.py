"""A step's code key covers every project module the step runs (steps/runtime/caching/keys.py, docs/caching.md
"What each step's key holds"): no project module is imported by name anywhere in the project, every project file a
step process loads is in its key, and a change to a baseline's features changes evaluate's key and the baseline
store's, so neither answers from what the old code computed."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_mlops_core.config import load_config
from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION
from steps import evaluate
from steps.runtime.caching import keys as cache_keys
from steps.runtime.data import baselines
from steps.runtime.data.baselines import cache
from steps.runtime.data.baselines.fitted import KINDS
from tests.fixtures_ernie import CONFIG, common, prepared_workspace, sentiment_rows, write_jsonl

ROOT = cache_keys.PROJECT_ROOT
# Calls that load a module by a name (or path) computed at run time: code no `import` statement names.
DYNAMIC = {"import_module", "__import__", "run_module", "run_path", "spec_from_file_location", "module_from_spec"}
# The CLI dispatches to its own sub-commands by name; it is no step's code (asserted below).
ALLOWED = {"paddle_mlops/cli.py"}
# Each cached step's code entries, as its key names them (steps/*.py `code_digest(...)`); the baseline store's key
# covers the child process the fit runs in (steps/runtime/data/baselines/__init__.py `_child`).
STEPS = {
    "prepare-data": ("steps.prepare_data",),
    "train": ("steps.train", "steps.runtime.training.launch"),
    "evaluate": ("steps.evaluate",),
    "upload": ("steps.upload",),
    "baseline store": ("steps.runtime.data.baselines",),
}


def _dynamic_imports(path: Path) -> list[str]:
    """`line: call` of each call in `path` that imports a module by a name that is not a constant naming a library."""
    found = []
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in DYNAMIC:
            continue
        first = node.args[0] if node.args else None
        named = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        if named is not None and named.split(".", 1)[0] not in cache_keys.PROJECT_PACKAGES:
            continue  # a library, by a constant name: the lock covers it
        found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_no_project_module_is_imported_by_name() -> None:
    """The key follows `import` statements, so an importlib/__import__/runpy load of project code would be code no
    key covers (the baseline kinds were: a changed TF-IDF feature reused the old baseline's answers)."""
    files = [p for package in cache_keys.PROJECT_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100
    found = [hit for path in files for hit in _dynamic_imports(path) if hit.split(":", 1)[0] not in ALLOWED]
    assert not found, "project code imported by name (import it with an `import` statement instead):\n" + "\n".join(
        found
    )
    keyed = {p.relative_to(ROOT).as_posix() for entries in STEPS.values() for p in _closure(*entries)}
    assert not ALLOWED & keyed  # the exception is code no step runs


def test_the_scan_finds_a_dynamic_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "steps" / "loader.py"
    module.parent.mkdir()
    module.write_text(
        "import importlib\nimportlib.import_module('sklearn.svm')\n"
        "def load(kind):\n    return importlib.import_module(f'steps.kinds.{kind}')\n__import__('steps.other')\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _dynamic_imports(module) == [
        "steps/loader.py:4: importlib.import_module(f'steps.kinds.{kind}')",
        "steps/loader.py:5: __import__('steps.other')",
    ]


def test_every_baseline_kind_is_a_module_the_package_imports() -> None:
    for task_type in KINDS:
        assert baselines.module_for(task_type).__name__ == f"steps.runtime.data.baselines.{KINDS[task_type]}"
    assert set(baselines._MODULES) == set(KINDS.values())


def _closure(*entries: str) -> set[Path]:
    return {p for entry in entries for p in cache_keys.module_closure(entry)}


# Run in a fresh interpreter: import the step's entry modules, as `python -m steps.<name>` does, run `work`, then
# print the project files in sys.modules.
_PROBE = """
import json, sys
from pathlib import Path
entries, work = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for entry in entries:
    __import__(entry)
if work.get("prepare"):
    from steps import prepare_data
    assert prepare_data.main(work["prepare"]) == 0
if work.get("fit"):
    from steps.runtime.data import baselines
    baselines.fit_in_process(work["fit"]["task"], Path(work["fit"]["data"]))
root = Path(sys.argv[3])
loaded = {str(Path(m.__file__).resolve()) for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
print(json.dumps(sorted(f for f in loaded if Path(f).is_relative_to(root) and "/.venv" not in f)))
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_workspace(tmp_path_factory.mktemp("keys")) / "data"


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_project_file_a_step_process_loads_is_in_its_key(
    step: str, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each cached step's process, in a fresh interpreter: its entry modules imported, then its work that loads
    code at run time. prepare-data runs whole on the tiny reviews; evaluate, train and the baseline store fit the
    sentiment baseline in process, the work evaluate's (and train's) spawned child does (`baselines._child`: the
    child's modules are code the step runs too); upload loads nothing at run time beyond its imports. A whole
    evaluate or train run takes minutes here; test_no_project_module_is_imported_by_name covers the rest of their
    run-time paths (every project import is a statement the key follows)."""
    monkeypatch.chdir(tmp_path)
    work: dict[str, object] = {}
    if step == "prepare-data":
        source = write_jsonl(tmp_path / "reviews.jsonl", sentiment_rows())
        work["prepare"] = [*common(f"data.source={source}"), "--output", str(tmp_path / "ws" / "data")]
    elif step in ("evaluate", "train", "baseline store"):
        work["fit"] = {"task": TEXT_CLASSIFICATION, "data": str(data_dir)}
    entries = STEPS[step]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(entries), json.dumps(work), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = {Path(f) for f in json.loads(done.stdout.strip().splitlines()[-1])}
    project = {f for f in loaded if f.relative_to(ROOT).parts[0] in cache_keys.PROJECT_PACKAGES}
    assert project, "the probe saw no project module"
    missing = sorted(f.relative_to(ROOT).as_posix() for f in project - _closure(*entries))
    assert not missing, f"{step} runs project code its key ({', '.join(entries)}) leaves out: {missing}"


def _copy_project(target: Path) -> Path:
    for package in cache_keys.PROJECT_PACKAGES:
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_a_changed_baseline_feature_recomputes_evaluate_and_the_baseline(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: the TF-IDF n-grams of baselines/text.py change. evaluate's key changes in its `code` part
    alone, and the baseline store's key changes, so the stored answers of the old code are not read: the baseline
    is fitted again. Keys are read from a copy of the project whose text.py is edited."""
    copy = _copy_project(tmp_path / "project")
    monkeypatch.setattr(cache_keys, "PROJECT_ROOT", copy)
    cache_keys.module_closure.cache_clear()
    try:
        _recomputes(cfg_root=tmp_path, data_dir=data_dir, copy=copy)
    finally:
        cache_keys.module_closure.cache_clear()  # the other tests' closures are of the checkout


def _recomputes(cfg_root: Path, data_dir: Path, copy: Path) -> None:
    tmp_path = cfg_root
    cfg = load_config(Path(CONFIG), "local", [f"storage.uri={tmp_path / 'store'}"])
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.pdmodel").write_bytes(b"weights")

    evaluate_before = evaluate.cache_key(cfg, model_dir, data_dir)
    stored_before, _ = cache.key(cfg, data_dir)
    first = baselines.fit(cfg, data_dir)
    assert not first.cached and baselines.fit(cfg, data_dir).cached  # the same code reads the stored answers

    text = copy / "steps" / "runtime" / "data" / "baselines" / "text.py"
    source = text.read_text(encoding="utf-8")
    assert "NGRAMS = (1, 3)" in source
    text.write_text(source.replace("NGRAMS = (1, 3)", "NGRAMS = (1, 2)"), encoding="utf-8")
    cache_keys.module_closure.cache_clear()

    evaluate_after = evaluate.cache_key(cfg, model_dir, data_dir)
    assert evaluate_after.digest != evaluate_before.digest
    assert evaluate_after.changed(evaluate_before.parts) == ["code"]
    stored_after, _ = cache.key(cfg, data_dir)
    assert stored_after != stored_before
    again = baselines.fit(cfg, data_dir)
    assert not again.cached and again.key == stored_after  # fitted again, stored under the new key
