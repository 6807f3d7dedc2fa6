"""Resumable training checkpoints: `checkpoints/step-N/` directories written atomically, and the batch-layout
check that keeps a resume from skipping the wrong samples."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from steps.runtime.runner import StepError

KEEP_CHECKPOINTS = 2


class Checkpoints:
    """`checkpoints/step-N/` directories, each written under a temporary name and renamed into place
    only once complete (meta.json last), so a process killed mid-save leaves nothing that loads."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def complete(self) -> list[tuple[int, Path]]:
        """Finished checkpoints, oldest first: `step-N` with a meta.json (temporary dirs never match)."""
        found = []
        for path in self.directory.glob("step-*"):
            match = re.fullmatch(r"step-(\d+)", path.name)
            if match and path.is_dir() and (path / "meta.json").is_file():
                found.append((int(match.group(1)), path))
        return sorted(found)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1][1] if done else None

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> Path:
        import paddle

        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(".tmp-step-*"):  # left by a process killed while saving
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step-{step}-", dir=self.directory))
        for name, obj in state.items():
            paddle.save(obj, str(tmp / f"{name}.pdparams"))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        final = self.directory / f"step-{step}"
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for _, old in self.complete()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    @staticmethod
    def load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        import paddle

        state = {p.stem: paddle.load(str(p)) for p in path.glob("*.pdparams")}
        return state, json.loads((path / "meta.json").read_text())


def check_layout(path: Path, saved: dict[str, int] | None, now: dict[str, int]) -> None:
    """StepError when the checkpoint at `path` counted its data position in another batch layout than `now`
    (or recorded none, so its data position cannot be trusted)."""
    if saved is None:
        raise StepError(
            f"checkpoint {path} records no batch layout, so where it stopped in the data is unknown. Delete "
            f"{path.parent} (and the checkpoint prefix in the object store) to start over."
        )
    changed = {key: (value, now[key]) for key, value in saved.items() if key in now and now[key] != value}
    if changed:
        what = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed.items())
        raise StepError(
            f"checkpoint {path} was written with a different batch layout ({what}): resuming would "
            "skip the wrong samples. Run with the checkpoint's settings, or delete "
            f"{path.parent} (and the checkpoint prefix in the object store) to start over."
        )


def rng_state(saved: Any) -> Any:
    """`random.getstate()` after a JSON round trip (lists back to tuples)."""
    return tuple(tuple(s) if isinstance(s, list) else s for s in saved)
