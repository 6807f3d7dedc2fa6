"""Content keys: what can change a step's outputs, digested. Equal keys mean the step would compute the same outputs,
so a cached copy of them can stand in (steps/runtime/caching/store.py); docs/caching.md lists what each step's key
holds.

A key is built from named parts, each a digest or a small value: the project code the step runs (`code_digest`: the
project modules its entry module imports, read from the files this process runs, complete because project code is
never imported by name; or an image digest where the code runs in another image), its resolved configuration
section(s) (`config_part`), the digests of its input artifacts (`dir_digest`), the locked library versions
(`lock_digest`) and whatever else the step's result depends on. The parts are kept beside the cached outputs, so a
rerun can say which part changed.
"""

from __future__ import annotations

import ast
import json
import platform
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.serving import cpu_quota
from steps.runtime.storage.objectstore.manifest import content_digest, file_entries, sha256_bytes, sha256_file

PROJECT_ROOT = Path(__file__).resolve().parents[3]
# The top-level packages of the project: an import of anything else is a library (covered by the lock).
PROJECT_PACKAGES = ("paddle_mlops_core", "paddle_mlops", "steps", "pipelines")
PROJECT_DISTRIBUTION = "paddle-mlops"
# Bumped when what a key holds changes meaning: every earlier cache entry stops matching.
KEY_SCHEMA = 1


@dataclass(frozen=True)
class Key:
    """A step's content key: `digest` over `step` and its named `parts` (JSON values)."""

    step: str
    parts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        body = json.dumps({"schema": KEY_SCHEMA, "step": self.step, "parts": dict(self.parts)}, sort_keys=True)
        return sha256_bytes(body.encode("utf-8"))

    @property
    def short(self) -> str:
        return self.digest[:12]

    def changed(self, earlier: Mapping[str, Any]) -> list[str]:
        """The names of the parts that differ from an `earlier` key's parts (added and removed ones too)."""
        return sorted(name for name in set(self.parts) | set(earlier) if self.parts.get(name) != earlier.get(name))


def digest_json(value: Any) -> str:
    return sha256_bytes(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))


def config_part(cfg: PipelineConfig, *paths: str) -> str:
    """The digest of the resolved configuration at dotted `paths` (`training`, `model.task`, …)."""
    dumped = cfg.model_dump(mode="json")
    picked = {}
    for path in paths:
        value: Any = dumped
        for name in path.split("."):
            if not isinstance(value, dict) or name not in value:
                raise KeyError(f"configuration has no {path!r}")
            value = value[name]
        picked[path] = value
    return digest_json(picked)


def dir_digest(directory: Path, exclude: Iterable[str] = ()) -> str:
    """The digest of a directory's files (relative path, size, sha256), leaving out the top-level names `exclude`."""
    skipped = set(exclude)
    entries = [e for e in file_entries(directory) if e["path"].split("/", 1)[0] not in skipped]
    return content_digest(entries)


def file_digest(path: Path) -> str:
    return sha256_file(path)


def _module_file(name: str, root: Path) -> Path | None:
    """The file that defines project module `name` (a package's `__init__.py`), or None when it is not one."""
    if name.split(".", 1)[0] not in PROJECT_PACKAGES:
        return None
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(path: Path, module: str) -> set[str]:
    """Every module name `path` (module `module`) imports, at the top or inside functions: an import in a function
    runs when the step calls it, so it is code the step runs too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return names


@cache
def module_closure(entry: str, root: Path = PROJECT_ROOT) -> tuple[Path, ...]:
    """The project source files module `entry` runs: itself, the project modules it imports, theirs, and every
    package `__init__.py` on the way (importing `a.b.c` runs `a` and `a.b` first)."""
    seen: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            path = _module_file(prefix, root)
            if path is None or prefix in seen:
                continue
            seen[prefix] = path
            todo.extend(_imported_names(path, prefix))
    if entry not in seen:
        raise ModuleNotFoundError(f"{entry} is not a module of this project under {root}")
    return tuple(sorted(set(seen.values())))


def code_digest(*entries: str, root: Path | None = None) -> str:
    """The digest of the project code modules `entries` run (relative path and sha256 of each file), read under
    `root` (the checkout this process runs, PROJECT_ROOT, by default).

    Complete because the project imports its own modules only with `import` statements: a module loaded by name
    (`importlib.import_module`, `__import__`, runpy) would be code no key covers, and tests/test_code_keys.py fails
    on one anywhere in the project, and on any project file a step process loads that its key leaves out."""
    root = PROJECT_ROOT if root is None else root
    files = sorted({path for entry in entries for path in module_closure(entry, root)})
    return digest_json([[path.relative_to(root).as_posix(), sha256_file(path)] for path in files])


@cache
def lock_digest(lock: Path = PROJECT_ROOT / "uv.lock") -> str:
    """The digest of the locked versions of the project's runtime dependencies (the closure of its
    `dependencies` in uv.lock; the `dev` extra left out, so a test-tool bump keeps every key)."""
    if not lock.is_file():
        raise FileNotFoundError(f"{lock} is missing: the step cache keys on the locked library versions")
    packages: dict[str, list[dict[str, Any]]] = {}
    for package in tomllib.loads(lock.read_text(encoding="utf-8")).get("package", []):
        packages.setdefault(package["name"], []).append(package)
    if PROJECT_DISTRIBUTION not in packages:
        raise KeyError(f"{lock} does not lock {PROJECT_DISTRIBUTION}")
    pinned: set[str] = set()
    todo = [d["name"] for d in packages[PROJECT_DISTRIBUTION][0].get("dependencies", [])]
    while todo:
        name = todo.pop()
        for package in packages.get(name, []):
            pin = f"{name}=={package.get('version', '')}"
            if pin in pinned:
                continue
            pinned.add(pin)
            todo.extend(d["name"] for d in package.get("dependencies", []))
    return digest_json(sorted(pinned))


def host_part() -> dict[str, Any]:
    """What a measurement on this host depends on: machine, CPU model, the vector/matrix features engines use,
    and the cores this process may use (a cgroup quota included, as the engine measurements see it)."""
    model, flags = "", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    features = sorted(f for f in flags if f.startswith(("avx", "amx")) or f in ("fma", "f16c"))
    return {
        "machine": platform.machine(),
        "cpu": model,
        "features": features,
        "cores": cpu_quota.default_threads(),
    }
