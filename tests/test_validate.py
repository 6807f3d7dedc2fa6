"""A published model through the rollout's validate and register steps, from its bucket notification.

The notification is the one a local publish makes (paddle_mlops/local/notify.py), passed through the generated
`rollout-on-publish` Sensor; the verdicts decide whether the `rollout` DAG's rollout task runs at all
(`when: verdict == passed`, read from the compiled WorkflowTemplate). The model is the tiny random-weight export
of fixtures_ernie; the held-out test split is prepared from the 64 tiny reviews, so `gate.threshold` picks the
verdict: 0 passes any model, 1 refuses it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures_ernie import common, make_exported_model, sentiment_rows, write_jsonl

from paddle_mlops.local import notify
from paddle_mlops.local.dag import evaluate_when, load_workflow
from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import CHALLENGER, CHAMPION
from pipelines import rollout_template
from steps import register, validate
from steps.runtime.release import registry
from steps.runtime.storage import objectstore
from steps.runtime.storage.objectstore import manifest
from tests.s3server import moto_s3_server

PASS = "gate.threshold=0.0"
FAIL = "gate.threshold=1.0"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_exported_model(tmp_path_factory.mktemp("export") / "model")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home}/mlflow.db")
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    return home


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "reviews.jsonl", sentiment_rows())


def overrides(reviews: Path, *more: str) -> list[str]:
    return [f"data.source={reviews}", *more]


def publish(cfg: Any, model_dir: Path, version: str) -> str:
    return objectstore.publish(
        model_dir, cfg.storage.uri, cfg.mlflow.registered_model, version, progress=False
    ).model_uri


def event_parameters(cfg: Any, model_uri: str) -> dict[str, str]:
    """What the Sensor hands the rollout workflow for the notification of `model_uri`'s manifest."""
    params = notify.rollout_parameters(cfg, notify.notification(cfg, model_uri))
    assert params is not None, "the Sensor dropped the notification of a published manifest"
    return params


def run_validate(out: Path, params: dict[str, str], extra: list[str], *args: str) -> dict[str, str]:
    argv = [
        *common(*extra),
        "--event-bucket",
        params["event-bucket"],
        "--event-key",
        params["event-key"],
        "--event-etag",
        params["event-etag"],
        *args,
        "--outputs-dir",
        str(out),
    ]
    assert validate.main(argv) == 0
    return {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}


def run_register(out: Path, judged: dict[str, str], extra: list[str]) -> str:
    argv = [
        *common(*extra),
        "--model-uri", judged["model-uri"],
        "--manifest-digest", judged["manifest-digest"],
        "--run-id", judged["run-id"],
        "--verdict", judged["verdict"],
        "--reason", judged["reason"],
        "--metrics", judged["metrics"],
        "--outputs-dir", str(out),
    ]  # fmt: skip
    assert register.main(argv) == 0
    return (out / "model-version").read_text(encoding="utf-8")


def rollout_runs(cfg: Any, verdict: str) -> dict[str, bool]:
    """Which tasks of the compiled `rollout` DAG run after validate said `verdict`."""
    workflow = load_workflow(rollout_template.build(cfg).to_dict())
    runs = {}
    for task in workflow.tasks:
        when = (task.when or "").replace("{{tasks.validate.outputs.parameters.verdict}}", verdict)
        runs[task.name] = evaluate_when(when) if when else True
    return runs


def version_tags(cfg: Any, version: str) -> dict[str, str]:
    client = registry.connect(cfg)
    return dict(client.get_model_version(cfg.mlflow.registered_model, version).tags)


def aliases(cfg: Any) -> dict[str, str | None]:
    client = registry.connect(cfg)
    name = cfg.mlflow.registered_model
    return {a: registry.get_alias_version(name, a, client) for a in (CHALLENGER, CHAMPION)}


def judge_and_record(tmp_path: Path, cfg: Any, model_uri: str, extra: list[str]) -> tuple[dict[str, str], str]:
    judged = run_validate(tmp_path / "validate", event_parameters(cfg, model_uri), extra)
    version = (
        run_register(tmp_path / "register", judged, extra) if rollout_runs(cfg, judged["verdict"])["register"] else ""
    )
    return judged, version


def test_a_good_model_passes_and_is_registered_as_challenger(tmp_path, home, reviews, exported):
    extra = overrides(reviews, PASS)
    cfg = load_config(env="local", overrides=extra)
    uri = publish(cfg, exported, "ext-good")
    judged, version = judge_and_record(tmp_path, cfg, uri, extra)
    assert judged["verdict"] == "passed" and judged["model-uri"] == uri
    assert json.loads(judged["metrics"])["examples"] > 0
    assert rollout_runs(cfg, judged["verdict"])["rollout"] is True
    tags = version_tags(cfg, version)
    assert tags[registry.VALIDATION_VERDICT] == "passed" and tags["storage_uri"] == uri and "test_accuracy" in tags
    assert aliases(cfg)[CHALLENGER] == version


def _stored_object(home: Path, model_uri: str, path: str) -> Path:
    entry = next(f for f in objectstore.read_manifest(model_uri)["files"] if f["path"] == path)
    return home / "store" / manifest.object_key(entry["sha256"])


@pytest.mark.parametrize("damage", ["altered", "missing"])
def test_a_damaged_object_is_refused_registered_with_the_reason_and_never_served(
    tmp_path, home, reviews, exported, damage
):
    extra = overrides(reviews, PASS)
    cfg = load_config(env="local", overrides=extra)
    uri = publish(cfg, exported, f"ext-{damage}")
    body = _stored_object(home, uri, "inference.pdiparams")
    if damage == "altered":
        data = bytearray(body.read_bytes())
        data[len(data) // 2] ^= 0xFF
        body.write_bytes(bytes(data))
    else:
        body.unlink()
    judged, version = judge_and_record(tmp_path, cfg, uri, extra)
    assert judged["verdict"] == "refused"
    assert "inference.pdiparams" in judged["reason"]
    assert ("corrupt" if damage == "altered" else "missing") in judged["reason"]
    assert rollout_runs(cfg, "refused")["rollout"] is False
    tags = version_tags(cfg, version)
    assert tags[registry.VALIDATION_VERDICT] == "refused" and "inference.pdiparams" in tags[registry.VALIDATION_REASON]
    assert aliases(cfg) == {CHALLENGER: None, CHAMPION: None}


def test_a_model_below_the_gate_is_refused(tmp_path, home, reviews, exported):
    extra = overrides(reviews, FAIL)
    cfg = load_config(env="local", overrides=extra)
    uri = publish(cfg, exported, "ext-weak")
    judged, version = judge_and_record(tmp_path, cfg, uri, extra)
    assert judged["verdict"] == "refused" and "threshold 1.0000" in judged["reason"]
    # a local run keeps the champion (if any) served when nothing is rolled out (rollout_template.SERVE_CHAMPION)
    runs = rollout_runs(cfg, "refused")
    assert runs == {"validate": True, "register": True, "rollout": False, "serve-champion": True}
    assert version_tags(cfg, version)[registry.VALIDATION_VERDICT] == "refused"
    assert aliases(cfg)[CHALLENGER] is None


def test_a_model_evaluated_on_another_test_split_is_judged_on_ours_and_says_so(tmp_path, home, reviews, exported):
    extra = overrides(reviews, PASS)
    cfg = load_config(env="local", overrides=extra)
    claimed = {"data_stats": {"sha256": {"test.jsonl": "0" * 64}}}  # trained with other data settings
    uri = objectstore.publish(
        exported, cfg.storage.uri, cfg.mlflow.registered_model, "ext-other-split", claimed, progress=False
    ).model_uri
    judged = run_validate(tmp_path / "validate", event_parameters(cfg, uri), extra)
    assert judged["verdict"] == "passed"
    assert "not the one the model reports" in judged["reason"]
    split = json.loads(judged["metrics"])["test_split"]
    assert split["model_reported"] == "0" * 64 and split["sha256"] != split["model_reported"]


def test_a_manifest_altered_after_its_notification_is_refused(tmp_path, home, reviews, exported):
    extra = overrides(reviews, PASS)
    cfg = load_config(env="local", overrides=extra)
    uri = publish(cfg, exported, "ext-swapped")
    params = event_parameters(cfg, uri)
    stored = home / "store" / cfg.mlflow.registered_model / "ext-swapped" / "manifest.json"
    doc = json.loads(stored.read_text())
    doc["metrics"] = {"accuracy": 0.99}  # someone rewrote the manifest after it was announced
    stored.write_text(json.dumps(doc))
    judged = run_validate(tmp_path / "validate", params, extra)
    assert judged["verdict"] == "refused" and "altered after it was published" in judged["reason"]
    assert params["event-etag"] != hashlib.md5(stored.read_bytes(), usedforsecurity=False).hexdigest()


def test_a_replayed_notification_is_dropped(tmp_path, home, reviews, exported):
    extra = overrides(reviews, PASS)
    cfg = load_config(env="local", overrides=extra)
    uri = publish(cfg, exported, "ext-replayed")
    first, version = judge_and_record(tmp_path / "first", cfg, uri, extra)
    assert first["verdict"] == "passed"
    replay = run_validate(tmp_path / "replay", event_parameters(cfg, uri), extra)
    assert replay["verdict"] == "duplicate" and f"version {version}" in replay["reason"]
    runs = rollout_runs(cfg, "duplicate")
    assert runs == {"validate": True, "register": False, "rollout": False, "serve-champion": True}
    again = run_validate(tmp_path / "redeploy", event_parameters(cfg, uri), extra, "--redeploy", "true")
    assert again["verdict"] == "passed"  # a person re-deploying it on purpose


def test_on_an_s3_store_the_manifest_is_judged_by_the_stores_etag(tmp_path, home, reviews, exported, monkeypatch):
    """The eTag compared is the one the store reports for the manifest it serves (not an MD5 computed here, which
    an encrypted or multipart object would not match): the announced manifest passes, an overwrite is refused."""
    from steps.runtime.storage import s3

    with moto_s3_server() as endpoint:
        monkeypatch.setenv("S3_ENDPOINT_URL", endpoint)
        s3.client().create_bucket(Bucket="models-test")
        extra = overrides(reviews, PASS, "storage.uri=s3://models-test/published")
        cfg = load_config(env="local", overrides=extra)
        uri = publish(cfg, exported, "ext-s3")
        params = event_parameters(cfg, uri)
        assert params["event-bucket"] == "models-test"
        assert params["event-key"] == "published%2Fernie-sentiment%2Fext-s3%2Fmanifest.json"
        stored = s3.client().head_object(Bucket="models-test", Key="published/ernie-sentiment/ext-s3/manifest.json")
        assert params["event-etag"] == stored["ETag"].strip('"')
        judged = run_validate(tmp_path / "first", params, extra)
        assert judged["verdict"] == "passed" and judged["model-uri"] == uri

        body = json.loads(objectstore.read_manifest_bytes(uri))
        body["metrics"] = {"accuracy": 0.99}
        s3.client().put_object(
            Bucket="models-test", Key="published/ernie-sentiment/ext-s3/manifest.json", Body=json.dumps(body)
        )
        again = run_validate(tmp_path / "again", params, extra, "--redeploy", "true")
        assert again["verdict"] == "refused" and "altered after it was published" in again["reason"]


@pytest.mark.parametrize(
    ("bucket", "key", "message"),
    [
        ("other-bucket", "ernie-sentiment%2Fv1%2Fmanifest.json", "bucket 'other-bucket'"),
        ("local", "ernie-sentiment%2Fv1%2Fmodel_config.json", "not a model manifest"),
        ("local", "ernie-sentiment%2F..%2Fmanifest.json", "not a valid name"),
    ],
)
def test_a_notification_that_names_no_model_of_this_store_is_an_error(tmp_path, home, bucket, key, message, capsys):
    argv = [*common(), "--event-bucket", bucket, "--event-key", key, "--outputs-dir", str(tmp_path / "o")]
    assert validate.main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_model_published_from_outside_train_deploy_is_validated_and_served(tmp_path, home, reviews, exported):
    """`paddle-mlops publish DIR`: published, notified, validated, registered and served by the local rollout;
    publishing the same directory again is a duplicate that moves nothing."""
    from paddle_mlops.publish import main as publish_main
    from steps.runtime.serving import local_server

    workdir = tmp_path / "work"
    model_dir = tmp_path / "from-a-notebook"
    shutil.copytree(exported, model_dir)
    sets = [arg for o in overrides(reviews, PASS, "serving.ready_timeout_seconds=120") for arg in ("--set", o)]
    try:
        assert publish_main([str(model_dir), "--workdir", str(workdir), *sets]) == 0
        summary = json.loads((workdir / "last-publish.json").read_text())
        assert summary["validation"]["verdict"] == "passed" and summary["rollout"] == "promoted"
        statuses = {s["name"]: s["status"] for s in summary["steps"]}
        assert statuses == {
            **dict.fromkeys(("validate", "register", "rollout"), "Succeeded"),
            "serve-champion": "Skipped",
        }
        import httpx

        body = httpx.post(
            f"{summary['serving_url']}/v1/models/ernie-sentiment:predict", json={"instances": ["质量很好"]}
        ).json()
        assert body["predictions"][0]["label"] in ("negative", "positive")
        cfg = load_config(env="local", overrides=overrides(reviews, PASS))
        assert aliases(cfg)[CHAMPION] == summary["model_version"]

        assert publish_main([str(model_dir), "--workdir", str(workdir), *sets]) == 0
        again = json.loads((workdir / "last-publish.json").read_text())
        assert again["validation"]["verdict"] == "duplicate"
        statuses = {s["name"]: s["status"] for s in again["steps"]}
        assert statuses == {
            "validate": "Succeeded",
            "register": "Skipped",
            "rollout": "Skipped",
            "serve-champion": "Succeeded",
        }
        assert again["serving_url"] == summary["serving_url"]  # serve-champion: the champion's server, kept
        assert aliases(cfg)[CHAMPION] == summary["model_version"]
    finally:
        local_server.stop_local_server(workdir)


def test_publish_refuses_a_directory_that_is_not_an_exported_model(tmp_path, capsys):
    from paddle_mlops.publish import main as publish_main

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a model")
    assert publish_main([str(tmp_path / "notes"), "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "is not an exported model" in err and "inference.json" in err
    assert not (tmp_path / "w" / "store").exists()


def test_publish_to_a_store_it_cannot_write_is_a_clear_error(tmp_path, exported, capsys, monkeypatch):
    from paddle_mlops.publish import main as publish_main

    with moto_s3_server() as endpoint:
        monkeypatch.setenv("S3_ENDPOINT_URL", endpoint)
        sets = ["--set", "storage.uri=s3://no-such-bucket/models"]
        assert publish_main([str(exported), "--workdir", str(tmp_path / "w"), "--no-rollout", *sets]) == 1
    err = capsys.readouterr().err
    assert "cannot publish to s3://no-such-bucket/models at http://127.0.0.1:" in err
    assert "that the bucket exists" in err and "Traceback" not in err


def test_validate_judges_against_its_own_baseline_never_the_manifest_s_claim(tmp_path, home, reviews, exported):
    """The rollout applies evaluate's gate, baseline included: the baseline is fitted on the splits validate prepares
    itself (or read from the store under their content key), so a manifest claiming a weak baseline changes nothing;
    the refusal names the model's figure and the baseline's, and register records both."""
    extra = overrides(reviews, PASS, "gate.baseline=require", "gate.baseline_margin=0.03")
    cfg = load_config(env="local", overrides=extra)
    forged = {"metrics": {"baseline": {"metric": "accuracy", "baseline": 0.01, "key": "forged"}}}
    uri = objectstore.publish(
        exported, cfg.storage.uri, cfg.mlflow.registered_model, "ext-forged", forged, progress=False
    ).model_uri
    judged, version = judge_and_record(tmp_path, cfg, uri, extra)
    metrics = json.loads(judged["metrics"]) if judged["metrics"] != "{}" else {}
    assert judged["verdict"] == "refused", judged["reason"]  # random weights lose to TF-IDF on the tiny reviews
    base = metrics["baseline"]
    assert base["manifest_baseline"] == 0.01 and base["baseline"] > 0.5 and base["kind"] == "tfidf-logreg"
    assert f"accuracy {metrics['accuracy']:.4f} ≥ threshold 0.0000" in judged["reason"]
    assert f"< baseline tfidf-logreg {base['baseline']:.4f} + margin 0.0300" in judged["reason"]
    tags = version_tags(cfg, version)
    assert float(tags["baseline_test_accuracy"]) == pytest.approx(base["baseline"])
    assert float(tags["baseline_difference"]) == pytest.approx(base["difference"])
