"""Training pods of a region read that region's store with its Secret (#60 item 3).

The TrainJob's `trainer.env` is upserted into the runtime's `node` container (kubeflow/trainer v2.3.0
pkg/runtime/framework/plugins/jobset/builder.go Trainer()), so the keys it names by Secret reference are the training
pods' own; a pod reading cn-east's store signs with cn-east's keys (steps/runtime/storage/s3.py `credentials`), the
pipeline's store (checkpoints) with storage.credentials_secret's.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from paddle_mlops_core.config import load_config, load_regions
from paddle_mlops_core.contracts import store_credentials_env
from pipelines import paddlejob, trainjob
from steps.runtime.storage import s3
from steps.runtime.weights import pretrained


def secret_refs(env: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}


def expected(cfg: Any) -> dict[str, dict[str, str]]:
    refs = {
        k: {"name": cfg.storage.credentials_secret, "key": k} for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    for region in load_regions().values():
        for key, name in store_credentials_env(region.name).items():
            refs[name] = {"name": region.store_credentials_secret, "key": key}
    return refs


def test_the_trainjob_and_paddlejob_pods_carry_each_regions_keys_from_its_secret() -> None:
    cfg = load_config(env="prod")
    assert secret_refs(trainjob.trainjob(cfg).manifest["spec"]["trainer"]["env"]) == expected(cfg)
    legacy = cfg.model_copy(update={"training": cfg.training.model_copy(update={"backend": "kubeflow-paddlejob"})})
    spec = paddlejob.build_paddlejob(legacy).manifest["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]
    assert secret_refs(spec["containers"][0]["env"]) == expected(cfg)


def test_a_run_in_cn_east_reads_weights_from_cn_easts_store_with_its_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(env="prod")
    (store,) = pretrained.region_stores(cfg, "cn-east")
    east = load_regions()["cn-east"]
    assert (store.uri, store.endpoint_url, store.exact) == (f"{east.store}/pretrained", east.store_endpoint_url, True)
    assert store.credentials == "cn-east"
    names = store_credentials_env("cn-east")
    monkeypatch.setenv(names["AWS_ACCESS_KEY_ID"], "AKIAEAST")
    monkeypatch.setenv(names["AWS_SECRET_ACCESS_KEY"], "east-secret")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPIPELINE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "pipeline-secret")
    # boto3's default session caches the keys it resolved first (an earlier test's): a step process resolves once.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    client = s3.client(store.endpoint_url, exact=store.exact, credentials=store.credentials)
    assert client._request_signer._credentials.access_key == "AKIAEAST"
    assert s3.client(cfg.storage.endpoint_url)._request_signer._credentials.access_key == "AKIAPIPELINE"


def test_a_laptop_reads_every_region_from_its_one_store() -> None:
    cfg = load_config(env="local")
    stores = pretrained.region_stores(cfg, "cn-east")
    assert [(s.endpoint_url, s.credentials) for s in stores] == [(None, None)]
    assert stores[0].uri.endswith("/store/pretrained")


def test_a_region_secret_without_its_store_is_refused() -> None:
    from pydantic import ValidationError

    from paddle_mlops_core.config.regions import RegionConfig

    east = load_regions()["cn-east"].model_dump(by_alias=True)
    east.pop("store")
    with pytest.raises(ValidationError, match="`store` is not"):
        RegionConfig.model_validate(east)
