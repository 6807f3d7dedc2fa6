"""What this node's CPU offers (`/proc/cpuinfo` flags) and what it lacks for an engine variant."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from steps.runtime.serving.engines.variants import variant_spec

CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The `flags` of the first processor in `cpuinfo`; an empty set where it cannot be read (not Linux, no x86)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def missing_features(variant: str, flags: Iterable[str]) -> list[str]:
    """What the node with `flags` lacks for `variant`: one entry per unmet need ("avx512_bf16 or amx_bf16");
    empty when it can run it. Unknown variant: ValueError."""
    have = set(flags)
    return [" or ".join(any_of) for any_of in variant_spec(variant).cpu_needs if not have.intersection(any_of)]
