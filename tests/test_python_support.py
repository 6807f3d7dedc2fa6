"""One supported Python range, stated alike in pyproject.toml (what pip enforces) and README (what users read).

The serving runtime uses asyncio.Runner (3.11+), so a 3.10 user must be refused by pip at install time
rather than crash at serve time; the images and this interpreter must sit inside the range too.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
README_RANGE = re.compile(r"Python 3\.(\d+)(?:–3\.(\d+))?|`python3` \(3\.(\d+)(?:–3\.(\d+))?\)")


def requires_python() -> SpecifierSet:
    return SpecifierSet(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    )


def supported_minors(spec: SpecifierSet) -> list[int]:
    """The 3.x minor versions the specifier admits (checked at x.0 and at a late patch release)."""
    return [m for m in range(6, 20) if Version(f"3.{m}.0") in spec and Version(f"3.{m}.99") in spec]


def readme_ranges() -> list[tuple[int, int]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    ranges = []
    for match in README_RANGE.finditer(text):
        low, *high = (int(g) for g in match.groups() if g is not None)
        ranges.append((low, high[0] if high else low))
    return ranges


def test_readme_states_the_range_pyproject_enforces() -> None:
    minors = supported_minors(requires_python())
    ranges = readme_ranges()
    assert ranges, "README states no supported Python version (expected e.g. `python3` (3.11))"
    for low, high in ranges:
        assert list(range(low, high + 1)) == minors, (
            f"README says Python 3.{low}–3.{high}; pyproject requires-python {requires_python()} admits "
            f"3.{minors[0]}–3.{minors[-1]}"
        )


def test_tools_target_the_lowest_supported_python() -> None:
    """ruff and mypy check against the floor, so 3.12-only syntax cannot slip in unseen."""
    floor = supported_minors(requires_python())[0]
    tools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    assert tools["ruff"]["target-version"] == f"py3{floor}"
    assert tools["mypy"]["python_version"] == f"3.{floor}"


def test_python_3_10_is_refused_at_install() -> None:
    # steps/runtime/serving/model_server/server.py uses asyncio.Runner, new in 3.11.
    assert Version("3.10.14") not in requires_python()


# Locked, binary-only packages without a wheel for 3.13 (checked with `pip download --only-binary :all:
# --python-version 3.13`): widening requires-python past 3.12 needs them first.
NO_CP313_WHEEL = {"paddle2onnx": "2.0.1", "tool-helpers": "0.1.2"}


def test_python_3_13_is_refused_while_locked_packages_have_no_wheel_for_it() -> None:
    locked = {p["name"]: p for p in tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))["package"]}
    for name, version in NO_CP313_WHEEL.items():
        package = locked[name]
        if package["version"] != version or "sdist" in package:
            continue  # another version or a source build: the note above is stale, look again
        assert Version("3.13.0") not in requires_python(), f"{name} {version} has no wheel for 3.13"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"{name} {version}" in readme for name, version in NO_CP313_WHEEL.items()), "README names them"


def test_running_interpreter_is_supported() -> None:
    running = Version(".".join(map(str, sys.version_info[:3])))
    assert running in requires_python(), f"Python {running} is outside requires-python {requires_python()}"


def test_images_use_a_supported_python() -> None:
    spec = requires_python()
    bases = [
        (path.relative_to(ROOT), match.group(1))
        for path in sorted((ROOT / "images").rglob("Dockerfile"))
        for match in re.finditer(r"^FROM python:(\d+\.\d+(?:\.\d+)?)", path.read_text(encoding="utf-8"), re.M)
    ]
    assert bases, "no python: base image found under images/"
    assert [(p, v) for p, v in bases if Version(v) not in spec] == []
