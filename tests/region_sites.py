"""A copy of configs/ whose regions name the stores a test gives them (configs/regions store, store_endpoint_url,
store_credentials_secret), and the per-region keys a pod would get from each region's Secret."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops_core.contracts import store_credentials_env

ROOT = Path(__file__).resolve().parents[1]
STORE_KEYS = ("store", "store_endpoint_url", "store_credentials_secret")


def copy_configs(dest: Path, stores: dict[str, dict[str, Any]]) -> Path:
    """configs/ copied to `dest`; each region in `stores` gets exactly those store keys (the shipped ones dropped),
    every other region none. Returns dest/pipeline.yaml."""
    shutil.copytree(ROOT / "configs", dest)
    for path in sorted((dest / "regions").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for key in STORE_KEYS:
            doc.pop(key, None)
        doc.update(stores.get(doc["name"], {}))
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return dest / "pipeline.yaml"


def region_keys(region: str) -> tuple[str, str]:
    """The access key pair a test gives `region`'s store (moto accepts any)."""
    return f"AKIA{region.upper().replace('-', '')}", f"secret-of-{region}"


def export_region_keys(monkeypatch: pytest.MonkeyPatch, *regions: str) -> None:
    """What a pod gets from each region's store_credentials_secret (pipelines/k8s.py store_credentials)."""
    for region in regions:
        names = store_credentials_env(region)
        key, secret = region_keys(region)
        monkeypatch.setenv(names["AWS_ACCESS_KEY_ID"], key)
        monkeypatch.setenv(names["AWS_SECRET_ACCESS_KEY"], secret)
