"""The step cache: content keys (steps/runtime/caching/keys.py), its store (step_cache.py), and steps (reuse.py)."""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import pytest

from paddle_mlops_core.config import load_config
from steps.runtime.caching import keys as cache_keys
from steps.runtime.caching import reuse
from steps.runtime.caching.keys import Key
from steps.runtime.caching.store import StepCache
from steps.runtime.storage import s3
from tests.conftest import PROJECT_ROOT
from tests.s3server import moto_s3_server

CONFIG = str(PROJECT_ROOT / "configs" / "pipeline.yaml")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny project: steps.work imports a helper at the top and another inside a function; steps.other is apart."""
    return _tree(
        tmp_path / "proj",
        {
            "steps/__init__.py": "",
            "steps/runtime/__init__.py": "",
            "steps/runtime/helper.py": "import json\nVALUE = 1\n",
            "steps/runtime/late.py": "LATE = 2\n",
            "steps/work.py": """
                from steps.runtime import helper

                def run():
                    from steps.runtime.late import LATE
                    return helper.VALUE + LATE
            """,
            "steps/other.py": "X = 3\n",
        },
    )


def test_the_code_a_step_runs_is_its_module_closure(project: Path) -> None:
    files = {p.relative_to(project).as_posix() for p in cache_keys.module_closure("steps.work", project)}
    # the package __init__ files run first; the import inside a function is code the step runs too
    assert files == {"steps/__init__.py", "steps/runtime/__init__.py", "steps/runtime/helper.py",
                     "steps/runtime/late.py", "steps/work.py"}  # fmt: skip
    before = cache_keys.code_digest("steps.work", root=project)
    (project / "steps" / "other.py").write_text("X = 4\n")
    cache_keys.module_closure.cache_clear()
    assert cache_keys.code_digest("steps.work", root=project) == before  # an unrelated module
    (project / "steps" / "runtime" / "late.py").write_text("LATE = 5\n")
    cache_keys.module_closure.cache_clear()
    assert cache_keys.code_digest("steps.work", root=project) != before
    with pytest.raises(ModuleNotFoundError):
        cache_keys.module_closure("steps.missing", project)


def test_the_real_steps_closures_hold_their_modules_and_not_the_rest() -> None:
    train = {p.relative_to(PROJECT_ROOT).as_posix() for p in cache_keys.module_closure("steps.train")}
    assert {"steps/train.py", "steps/runtime/training/trainer.py", "paddle_mlops_core/config/models.py"} <= train
    assert not any(p.startswith(("pipelines/", "tests/", "benchmarks/")) for p in train)
    assert "steps/runtime/serving/model_server/app.py" not in train  # the server's code does not retrain a model


def test_the_lock_digest_holds_the_runtime_closure_only(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"

    def write(ruff: str, numpy: str) -> Path:
        lock.write_text(
            textwrap.dedent(f"""
                version = 1
                [[package]]
                name = "paddle-mlops"
                version = "0.1.0"
                dependencies = [{{ name = "pandas" }}]
                [package.optional-dependencies]
                dev = [{{ name = "ruff" }}]
                [[package]]
                name = "pandas"
                version = "2.2.0"
                dependencies = [{{ name = "numpy" }}]
                [[package]]
                name = "numpy"
                version = "{numpy}"
                [[package]]
                name = "ruff"
                version = "{ruff}"
            """)
        )
        cache_keys.lock_digest.cache_clear()
        return lock

    first = cache_keys.lock_digest(write("0.6.0", "2.0.0"))
    assert cache_keys.lock_digest(write("0.7.0", "2.0.0")) == first  # a dev tool's bump keeps every key
    assert cache_keys.lock_digest(write("0.6.0", "2.1.0")) != first  # a runtime dependency's changes them
    cache_keys.lock_digest.cache_clear()


def test_a_key_names_what_changed() -> None:
    key = Key("train", {"code": "a", "config": "b", "data": "c"})
    assert key.digest == Key("train", {"data": "c", "config": "b", "code": "a"}).digest
    assert key.digest != Key("evaluate", dict(key.parts)).digest
    assert key.changed({"code": "a", "config": "x", "data": "c", "gone": "y"}) == ["config", "gone"]
    cfg = load_config(CONFIG, "local")
    assert cache_keys.config_part(cfg, "training") != cache_keys.config_part(
        load_config(CONFIG, "local", ["training.learning_rate=0.5"]), "training"
    )
    with pytest.raises(KeyError, match="no 'training.nope'"):
        cache_keys.config_part(cfg, "training.nope")


@pytest.fixture(params=["local", "s3"])
def cache(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "local":
        yield StepCache(str(tmp_path / "cache"))
        return
    with moto_s3_server() as endpoint:
        s3.client(endpoint).create_bucket(Bucket="cache")
        yield StepCache("s3://cache/step-cache", endpoint)


def _outputs(root: Path, text: str) -> Path:
    return _tree(root, {"model/weights.bin": text, "model/config/a.json": '{"a": 1}'}) / "model"


def test_an_entry_is_restored_file_for_file_where_the_step_wants_it(cache: StepCache, tmp_path: Path) -> None:
    key = Key("train", {"code": "1"})
    assert cache.lookup(key) is None
    entry = cache.record(key, {"model": _outputs(tmp_path / "a", "w1")}, {"answer": "42"}, "run-1")
    assert entry is not None and entry.outputs == {"answer": "42"} and entry.run == "run-1"
    target = tmp_path / "ws" / "model"
    _tree(target, {"stale.txt": "left by an earlier attempt"})
    cache.restore(entry, {"model": str(target)})
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        "config/a.json",
        "weights.bin",
    ]
    assert (target / "weights.bin").read_text() == "w1"
    # the first run to record a key keeps it
    again = cache.record(key, {"model": _outputs(tmp_path / "b", "w2")}, {"answer": "43"}, "run-2")
    assert again is not None and again.run == "run-1" and again.outputs == {"answer": "42"}


def test_a_damaged_entry_is_computed_again_and_repaired(tmp_path: Path) -> None:
    cache = StepCache(str(tmp_path / "cache"))
    key = Key("train", {"code": "1"})
    cache.record(key, {"model": _outputs(tmp_path / "a", "weights")}, {}, "run-1")
    (damaged,) = [p for p in (tmp_path / "cache" / "objects" / "sha256").iterdir() if p.read_bytes() == b"weights"]
    damaged.write_bytes(b"weightz")
    args = argparse.Namespace(step_cache=cache.root, rerun="")
    found = reuse.begin(args, key)
    target = tmp_path / "ws" / "model"
    assert found.entry is not None and found.restore({"model": str(target)}) is None  # never served
    assert not target.exists()
    # the step computes, and recording the same files again repairs the damaged object
    report = json.loads(found.record({"model": _outputs(tmp_path / "b", "weights")}, {})["cache"])
    assert report == {"reused": False, "key": key.digest, "run": ""}
    assert damaged.read_bytes() == b"weights"
    restored = reuse.begin(args, key).restore({"model": str(target)})
    assert restored is not None and json.loads(restored["cache"])["reused"] is True


def test_rerun_and_an_empty_cache_root_compute(tmp_path: Path) -> None:
    key = Key("evaluate", {"code": "1"})
    StepCache(str(tmp_path / "cache")).record(key, {"model": _outputs(tmp_path / "a", "w")}, {}, "run-1")
    root = str(tmp_path / "cache")
    assert reuse.begin(argparse.Namespace(step_cache=root, rerun=""), key).entry is not None
    for rerun in ("evaluate", "train,evaluate", "all"):
        assert reuse.begin(argparse.Namespace(step_cache=root, rerun=rerun), key).entry is None
    assert reuse.begin(argparse.Namespace(step_cache=root, rerun="train"), key).entry is not None
    assert reuse.begin(argparse.Namespace(step_cache="", rerun=""), key).cache is None


def test_a_miss_says_which_part_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = str(tmp_path / "cache")
    StepCache(root).record(Key("train", {"code": "1", "config": "a"}), {"m": _outputs(tmp_path, "w")}, {}, "run-7")
    caplog.set_level("INFO", logger="steps.cache")
    reuse.begin(argparse.Namespace(step_cache=root, rerun=""), Key("train", {"code": "1", "config": "b"}))
    assert "changed since run run-7: config" in caplog.text


def test_evaluate_keys_no_rollout_setting(tmp_path: Path) -> None:
    """The canary's health limits (error rate, p99 latency) are the rollout's: changing one must not re-run the engine
    selection and the scoring; a setting evaluate measures with (the batch it serves) must."""
    from steps import evaluate

    model_dir, data_dir = tmp_path / "model", tmp_path / "data"
    for directory in (model_dir, data_dir):
        directory.mkdir()
        (directory / "f").write_text("x")

    def key(*sets: str) -> str:
        return evaluate.cache_key(load_config(env="local", overrides=list(sets)), model_dir, data_dir).digest

    base = key()
    assert key("serving.max_p99_latency_ms=50", "serving.max_error_rate=0.5") == base
    assert key("serving.max_batch_size=3") != base
