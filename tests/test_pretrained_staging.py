"""Pretrained ERNIE by name: `weights stage` to the object store (moto's S3 server), resolved from the run's region,
verified file by file, fine-tuned, exported, published with its provenance, served. No network beyond loopback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fixtures_ernie import TINY_OVERRIDES, sentiment_rows, write_jsonl
from region_sites import copy_configs
from s3server import moto_s3_server
from test_pretrained import offline  # noqa: F401  (fixture: any connection off loopback fails the test)

from paddle_mlops import weights
from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.config.pretrained_names import known_names
from paddle_mlops_core.contracts import PRETRAINED_RECORD
from steps import prepare_data, register, train, upload
from steps.runtime.release import registry
from steps.runtime.storage import s3
from steps.runtime.weights import pretrained

# Every test here runs offline: a connection off loopback (a model hub) fails it.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("offline")]

ROOT = Path(__file__).resolve().parents[1]
NAME = "ernie-3.0-nano-zh"
NORTH, EAST = "s3://weights-north/store", "s3://weights-east/store"
# Tokens of the staged tokenizer, in an order of its own: its ids are not the character vocabulary's.
VOCAB = [
    "[PAD]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[UNK]",
    *sorted({c for r in sentiment_rows() for c in r["text"]}, reverse=True),
]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of configs/ whose two regions have object stores of their own (on one moto server), as cwd."""
    configs = tmp_path / "site" / "configs"
    copy_configs(configs, {"cn-north": {"store": NORTH}, "cn-east": {"store": EAST}})
    local = configs / "env" / "local.yaml"  # this laptop reads the regions' stores (moto's, on loopback)
    local.write_text(local.read_text().replace("region_stores: false", "region_stores: true"), encoding="utf-8")
    monkeypatch.chdir(tmp_path / "site")
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("PADDLE_MLOPS_REGION", raising=False)
    return configs / "pipeline.yaml"


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    with moto_s3_server() as url:
        httpx.post(f"{url}/moto-api/reset").raise_for_status()  # moto's state is per process, not per server
        monkeypatch.setenv("S3_ENDPOINT_URL", url)
        for bucket in ("weights-north", "weights-east"):
            s3.client(url).create_bucket(Bucket=bucket)
        yield url


def save_tiny(directory: Path, seed: int) -> Path:
    """A tiny ERNIE backbone and its own tokenizer, saved with PaddleNLP's save_pretrained."""
    import paddle
    from fixtures_ernie import tiny_ernie_config
    from paddlenlp.transformers import ErnieModel, ErnieTokenizer

    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tokenizer = ErnieTokenizer(str(directory / "vocab.txt"))
    paddle.seed(seed)
    ErnieModel(tiny_ernie_config(tokenizer, 64)).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def stage(config: Path, source: Path, *extra: str) -> int:
    return weights.main(["stage", NAME, "--from", str(source), "--config", str(config), "--env", "local", *extra])


def objects(bucket: str, endpoint: str) -> dict[str, object]:
    listing = s3.client(endpoint).list_objects_v2(Bucket=bucket)
    return {o["Key"]: (o["LastModified"], o["ETag"]) for o in listing.get("Contents", [])}


def config_args(config: Path, *overrides: str) -> list[str]:
    tiny = [*TINY_OVERRIDES, f"model.pretrained={NAME}", "training.max_steps=3", "training.learning_rate=0.00005"]
    return ["--config", str(config), "--env", "local", "--overrides", json.dumps([*tiny, *overrides])]


def prepare(config: Path, ws: Path, *overrides: str) -> int:
    src = write_jsonl(ws.parent / "reviews.jsonl", sentiment_rows())
    return prepare_data.main([*config_args(config, f"data.source={src}", *overrides), "--output", str(ws / "data")])


def test_names_are_paddlenlps_own_and_a_typo_gets_did_you_mean() -> None:
    from paddlenlp.transformers import ErnieModel, ErnieTokenizer

    names = known_names()
    # read from the installed package's source, the same set its classes resolve (a model and a tokenizer)
    assert names == set(ErnieModel.pretrained_init_configuration) & set(
        ErnieTokenizer.pretrained_resource_files_map["vocab_file"]
    )
    for name in ("ernie-3.0-medium-zh", "ernie-3.0-base-zh", "ernie-3.0-mini-zh", "ernie-3.0-micro-zh",
                 "ernie-3.0-nano-zh", "ernie-1.0-base-zh"):  # fmt: skip
        assert load_config(env="local", overrides=[f"model.pretrained={name}"]).model.pretrained_name == name
    with pytest.raises(ConfigError) as err:
        load_config(env="local", overrides=["model.pretrained=ernie-3.0-meduim-zh"])
    assert "model.pretrained" in str(err.value) and "did you mean 'ernie-3.0-medium-zh'" in str(err.value)
    # a path is a location, never looked up as a name
    assert load_config(env="local", overrides=["model.pretrained=./my-weights"]).model.pretrained_name is None


def test_production_fine_tunes_ernie_3_medium() -> None:
    for task in ("sentiment", "ner", "text-matching"):
        cfg = load_config(env="prod", task=task)
        assert cfg.model.pretrained == "ernie-3.0-medium-zh" and not cfg.model.allow_download
        assert cfg.training.learning_rate <= 1e-4 and cfg.training.amp != "off", task
    assert load_config(env="local").model.pretrained is None  # the laptop keeps the small from-scratch model
    # ... except for NER, where the project's own MLM-pretrained small ERNIE pays (docs/benchmarks.md, "Quality");
    # production never falls back to training from scratch, whatever a task file allows locally
    ner = load_config(env="local", task="ner")
    assert ner.model.pretrained == "ernie-mini-corpus-zh" and ner.model.scratch_if_unstaged
    assert not load_config(env="prod", task="ner").model.scratch_if_unstaged


def test_stage_twice_sends_nothing_the_second_time(
    site: Path,
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = save_tiny(tmp_path / "tiny", seed=1)
    assert stage(site, source) == 0
    first = capsys.readouterr().out
    assert first.count("staged ernie-3.0-nano-zh") == 2  # replicated to both training regions' stores
    before = objects("weights-east", endpoint) | objects("weights-north", endpoint)
    assert any(k.endswith("manifest.json") for k in before)
    assert stage(site, source) == 0
    second = capsys.readouterr().out
    assert second.count(": 0 bytes sent") == 2
    assert objects("weights-east", endpoint) | objects("weights-north", endpoint) == before  # no object rewritten
    assert weights.main(["list", "--config", str(site), "--env", "local"]) == 0
    assert NAME in capsys.readouterr().out


def test_staged_name_resolves_in_the_run_region_fine_tunes_and_serves(
    site: Path,
    endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from steps.runtime.weights.ernie import ExportedModel

    assert stage(site, save_tiny(tmp_path / "a", seed=1)) == 0  # both regions
    assert stage(site, save_tiny(tmp_path / "b", seed=2), "--to", NORTH) == 0  # a newer copy, cn-north only
    cfg = load_config(site, "local", [f"model.pretrained={NAME}"])
    copies = {r: pretrained.newest(pretrained.region_stores(cfg, r)[0], NAME) for r in ("cn-north", "cn-east")}
    assert copies["cn-north"].digest != copies["cn-east"].digest

    monkeypatch.setenv("PADDLE_MLOPS_REGION", "cn-east")
    ws = tmp_path / "ws"
    assert prepare(site, ws) == 0
    record = json.loads((ws / "data" / PRETRAINED_RECORD).read_text())
    assert (record["digest"], record["store"]) == (copies["cn-east"].digest, f"{EAST}/pretrained")
    assert not (ws / "data" / "vocab.txt").exists()  # the staged tokenizer, never a character vocabulary

    assert train.main([*config_args(site), "--workspace", str(ws)]) == 0
    exported = json.loads((ws / "model" / "model_config.json").read_text())
    assert exported["pretrained"] == NAME and exported["pretrained_digest"] == record["digest"]
    assert exported["pretrained_paddlenlp_version"] == record["paddlenlp_version"]
    assert (ws / "model" / "vocab.txt").read_text(encoding="utf-8").split() == VOCAB
    import mlflow

    run = mlflow.search_runs(experiment_names=["ernie-sentiment"], output_format="list")[0]
    assert run.data.params["pretrained.name"] == NAME
    assert run.data.params["pretrained.digest"] == record["digest"]

    out = tmp_path / "out"
    common = ["--config", str(site), "--env", "local", "--git-sha", "0123456789abcdef", "--outputs-dir", str(out)]
    assert upload.main([*common, "--workspace", str(ws), "--run-id", run.info.run_id]) == 0
    model_uri, digest = (out / "model-uri").read_text(), (out / "manifest-digest").read_text()
    published = json.loads((Path(model_uri) / "manifest.json").read_text())
    assert published["pretrained"]["pretrained_digest"] == record["digest"]
    assert register.main([*common, "--model-uri", model_uri, "--manifest-digest", digest, "--run-id", ""]) == 0
    tags = registry.connect(cfg).get_model_version("ernie-sentiment", (out / "model-version").read_text()).tags
    assert (tags["pretrained"], tags["pretrained_digest"]) == (NAME, record["digest"])

    texts = ["手机很好第1次", "酒店很差第2次", "服务满意", "快递坏了"]
    in_process = ExportedModel(ws / "model").predict(texts)
    ready = tmp_path / "ready.json"
    server = subprocess.Popen(
        [sys.executable, "-m", "steps.serve", *config_args(site)[:4], "--model-dir", str(ws / "model"),
         "--port", "0", "--ready-file", str(ready)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(300):
            if ready.is_file() or server.poll() is not None:
                break
            subprocess.run(["sleep", "0.2"], check=True)
        url = json.loads(ready.read_text())["url"]
        answer = httpx.post(f"{url}/v1/models/ernie-sentiment:predict", json={"instances": texts}, timeout=30)
        assert answer.status_code == 200, answer.text
        served = answer.json()["predictions"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert [p["label"] for p in served] == [p["label"] for p in in_process]
    for a, b in zip(served, in_process, strict=True):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)


def test_a_corrupted_staged_file_is_refused_by_name_and_restaging_repairs_it(
    site: Path,
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = save_tiny(tmp_path / "tiny", seed=1)
    assert stage(site, source, "--to", EAST) == 0
    ws = tmp_path / "ws"
    assert prepare(site, ws) == 0
    record = json.loads((ws / "data" / PRETRAINED_RECORD).read_text())
    staged = pretrained.newest(pretrained.weights_store(EAST), NAME)
    params = next(f for f in staged.manifest["files"] if f["path"] == "model_state.pdparams")
    s3.client(endpoint).put_object(
        Bucket="weights-east", Key=f"store/pretrained/objects/sha256/{params['sha256']}", Body=b"not the weights"
    )
    shutil.rmtree(pretrained._cache_dir() / NAME / record["digest"], ignore_errors=True)
    capsys.readouterr()
    assert train.main([*config_args(site), "--workspace", str(ws)]) == 2
    err = capsys.readouterr().err
    assert "model_state.pdparams" in err and "corrupt" in err and "weights stage" in err
    assert not (ws / "model").exists()  # nothing trained, nothing exported

    assert stage(site, source, "--to", EAST) == 0
    assert "0 bytes sent" not in capsys.readouterr().out  # the damaged object was sent again
    assert train.main([*config_args(site), "--workspace", str(ws)]) == 0


def test_a_name_staged_nowhere_fails_at_prepare_with_the_fix(
    site: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    assert prepare(site, ws) == 2
    err = capsys.readouterr().err
    assert f"paddle-mlops weights stage {NAME} --to s3://weights-north/store" in err
    assert "model.allow_download" in err
    assert not (ws / "data").exists()  # failed before writing anything

    # The laptop's choice: train the small model from scratch instead, and say so.
    assert prepare(site, ws, "model.scratch_if_unstaged=true") == 0
    assert (ws / "data" / "vocab.txt").is_file()
    assert "not staged" in json.loads((ws / "data" / PRETRAINED_RECORD).read_text())["from_scratch"]
    assert train.main([*config_args(site, "model.scratch_if_unstaged=true"), "--workspace", str(ws)]) == 0
    exported = json.loads((ws / "model" / "model_config.json").read_text())
    assert exported["pretrained"] is None and exported["pretrained_unstaged"] == NAME


def _follows(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_compiled_pipeline_carries_the_production_weights_to_prepare_and_the_trainjob() -> None:
    """argo/train-deploy.yaml (drift-checked by `compile --check`): its `env` default loads a configuration that
    fine-tunes ernie-3.0-medium-zh, and both steps that act on it (prepare-data resolves, the TrainJob's nodes
    fetch) load that configuration; a name mounts no claim."""
    import yaml

    (doc,) = yaml.safe_load_all((ROOT / "argo" / "train-deploy.yaml").read_text(encoding="utf-8"))
    env = next(p for p in doc["spec"]["arguments"]["parameters"] if p["name"] == "env")["value"]
    assert load_config(env=env).model.pretrained == "ernie-3.0-medium-zh"
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    prepare_args = templates["prepare-data"]["container"]["args"]
    from pipelines.train_step import placed_manifest

    trainjob = placed_manifest(templates["train"])
    assert trainjob is not None
    node_args = trainjob["spec"]["trainer"]["command"]
    for args in (prepare_args, node_args):
        assert _follows(args, "--env") == "{{workflow.parameters.env}}"
        assert _follows(args, "--config") == "{{workflow.parameters.config}}"
    pod = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert "volumes" not in pod["template"]["spec"]["template"]["spec"]  # weights come from the store, verified


def test_with_download_allowed_an_unstaged_name_goes_through_paddlenlps_download(
    site: Path, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.allow_download: prepare records a download and the train step asks PaddleNLP for the name itself
    (its hub stands in: a local copy answers for the name, so no byte leaves the machine)."""
    from paddlenlp.transformers import AutoModel, AutoTokenizer

    copy = save_tiny(tmp_path / "hub-copy", seed=3)
    asked: list[str] = []
    for cls in (AutoModel, AutoTokenizer):
        real = cls.from_pretrained.__func__

        def from_hub(klass, name, *args, _real=real, **kwargs):  # type: ignore[no-untyped-def]
            asked.append(str(name))
            return _real(klass, str(copy) if name == NAME else name, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(from_hub))
    ws = tmp_path / "ws"
    assert prepare(site, ws, "model.allow_download=true") == 0
    assert json.loads((ws / "data" / PRETRAINED_RECORD).read_text())["download"] is True
    # prepare-data's n-gram table asks for the tokenizer alone, where the model has one (train_tokenizer.py)
    tokenized = asked.count(NAME)
    assert tokenized == int((ws / "data" / "ngrams.npz").is_file())
    assert train.main([*config_args(site, "model.allow_download=true"), "--workspace", str(ws)]) == 0
    assert asked.count(NAME) == tokenized + 2  # model and tokenizer, by name
    exported = json.loads((ws / "model" / "model_config.json").read_text())
    assert exported["pretrained"] == NAME and exported["pretrained_uri"] == "paddlenlp-download"
    assert len(exported["pretrained_digest"]) == 64


def test_a_pod_reads_the_resolved_digest_from_its_own_regions_store(
    site: Path, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepare-data (on the manager) resolved the digest in cn-north's store; a training pod in cn-east
    (PADDLE_MLOPS_REGION from its worker's runtime) reads the same digest from cn-east's: cn-north's copy is
    damaged here, and training still verifies and runs."""
    assert stage(site, save_tiny(tmp_path / "tiny", seed=1)) == 0
    ws = tmp_path / "ws"
    assert prepare(site, ws) == 0
    record = json.loads((ws / "data" / PRETRAINED_RECORD).read_text())
    assert record["region"] == "cn-north"
    client = s3.client(endpoint)
    for obj in client.list_objects_v2(Bucket="weights-north", Prefix="store/pretrained/objects/")["Contents"]:
        client.put_object(Bucket="weights-north", Key=obj["Key"], Body=b"damaged")
    shutil.rmtree(pretrained._cache_dir() / NAME / record["digest"], ignore_errors=True)
    monkeypatch.setenv("PADDLE_MLOPS_REGION", "cn-east")
    assert train.main([*config_args(site), "--workspace", str(ws)]) == 0
    exported = json.loads((ws / "model" / "model_config.json").read_text())
    assert (
        exported["pretrained_uri"].startswith(f"{EAST}/pretrained/")
        and exported["pretrained_digest"] == record["digest"]
    )


def test_a_sequence_longer_than_the_weights_positions_is_refused_before_training(
    site: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny weights have 64 positions: max_seq_len 128 would index past them (Paddle's embedding kernel fails
    mid-training); prepare-data refuses it from the staged manifest, the train step from the loaded config."""
    source = save_tiny(tmp_path / "tiny", seed=1)
    assert stage(site, source) == 0
    ws = tmp_path / "ws"
    capsys.readouterr()
    assert prepare(site, ws, "model.max_seq_len=128") == 2
    assert "max_position_embeddings 64" in capsys.readouterr().err
    assert prepare(site, ws) == 0  # 32
    assert train.main([*config_args(site, "model.max_seq_len=128"), "--workspace", str(ws)]) == 2
    assert "set model.max_seq_len to at most 64" in capsys.readouterr().err
    assert not (ws / "model").exists()


def test_a_store_that_refuses_is_exit_1_and_stages_nothing(
    site: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = save_tiny(tmp_path / "tiny", seed=1)
    capsys.readouterr()
    assert stage(site, source, "--to", "s3://no-such-bucket/store") == 1
    err = capsys.readouterr().err
    # one line saying what to check, not botocore's traceback (the suite's earlier in-process steps may leave a
    # logging handler on a closed capture stream, whose own "Logging error" report is not ours)
    assert any(line.startswith("paddle-mlops weights: ") and "bucket exists" in line for line in err.splitlines())
    assert "raise error_class" not in err
    assert weights.main(["list", "--config", str(site), "--env", "local"]) == 0
    assert "nothing staged" in capsys.readouterr().out


def test_prepare_data_counts_the_ngram_table_with_the_staged_tokenizer_alone(
    site: Path, endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A staged name: prepare-data counts the n-gram table in the staged weights' token ids (not its own character
    vocabulary's), fetching only their tokenizer files, each verified against the manifest (train_tokenizer.py)."""
    import numpy as np

    from steps.runtime.data import train_tokenizer

    assert stage(site, save_tiny(tmp_path / "tiny", seed=1)) == 0
    fetched: list[str] = []
    real = train_tokenizer.fetching.fetch

    def fetch(*args, published, **kwargs):  # type: ignore[no-untyped-def]
        fetched.extend(f["path"] for f in published["files"])
        return real(*args, published=published, **kwargs)

    monkeypatch.setattr(train_tokenizer.fetching, "fetch", fetch)
    ws = tmp_path / "ws"
    assert prepare(site, ws, "model.char_ngram_min_count=1", "model.char_ngram_trigrams=false") == 0
    assert "vocab.txt" in fetched and not any(p.endswith((".pdparams", ".safetensors")) for p in fetched)
    assert not (ws / "data" / "vocab.txt").exists()
    table = np.load(ws / "data" / "ngrams.npz")
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(tmp_path / "tiny" / "vocab.txt"))
    from collections import Counter

    texts = [json.loads(line)["text"] for line in (ws / "data" / "train.jsonl").read_text().splitlines()]
    pad, counts = tokenizer.pad_token_id, Counter[tuple[int, int]]()
    for ids in tokenizer(texts, max_length=32, truncation=True)["input_ids"]:
        counts.update(zip([pad, *ids], [*ids, pad], strict=True))
    assert [tuple(g) for g in table["bigrams"].tolist()] == [g for g, _ in counts.most_common()]
    assert max(max(g) for g in counts) < len(VOCAB)  # the staged vocabulary's ids
