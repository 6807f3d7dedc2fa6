"""Configuration: merge order, strictness, and readable errors with exit code 2."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from paddle_mlops.cli import main
from paddle_mlops_core.config import ConfigError, load_config, load_regions, load_teams
from paddle_mlops_core.config.images import check_pinned_image
from paddle_mlops_core.config.loader import read_yaml
from paddle_mlops_core.config.models import PipelineConfig

# What configs/pipeline.yaml may set: the settings that depend on where the pipeline runs
# (service addresses, registry, cluster names, forge, regions). Everything else has one default,
# in its section's module of paddle_mlops_core/config/, and differs per environment only in configs/env/*.yaml.
SITE_CHOICES = (
    "training.metrics_port",
    "storage.",
    "mlflow.tracking_uri",
    "serving.regions",
    "images.",
    "cluster.namespace",
    "cluster.build_namespace",
    "cluster.service_account",
    "cluster.team",
    "cluster.region",
    "cluster.retrain_repository",
    "cluster.retrain_branch",
    "trigger.",
)


def test_base_env_and_set_merge_in_order(project_root: Path) -> None:
    base = load_config(project_root / "configs/pipeline.yaml")
    local = load_config(project_root / "configs/pipeline.yaml", "local")
    over = load_config(project_root / "configs/pipeline.yaml", "local", ["training.epochs=7", "gate.threshold=0.5"])
    assert base.storage.uri.startswith("s3://") and local.storage.uri == "local"
    assert base.serving.target == "kserve" and local.serving.target == "local"
    assert over.training.epochs == 7 and over.gate.threshold == 0.5
    assert over.storage.uri == "local"  # the overlay survives the overrides


def test_every_environment_overlay_validates(project_root: Path) -> None:
    for env in ("local", "dev", "prod"):
        load_config(project_root / "configs/pipeline.yaml", env)


def test_an_environment_sets_one_task_apart_in_its_tasks_section(project_root: Path) -> None:
    """configs/env/local.yaml: the local NER model beats its CRF baseline, so its gate requires it; sentiment's and
    text matching's only warn. dev and prod set theirs for every task, and --set still comes last."""
    base = project_root / "configs/pipeline.yaml"
    local = {task: load_config(base, "local", task=task).gate for task in ("sentiment", "ner", "text-matching")}
    assert local["ner"].baseline == "require" and local["ner"].baseline_margin == 0.0
    assert local["sentiment"].baseline == local["text-matching"].baseline == "warn"
    assert load_config(base, "local", ["gate.baseline=warn"], task="ner").gate.baseline == "warn"
    assert load_config(base, "local", task="ner").storage.uri == "local"  # the rest of the overlay holds
    assert load_config(base, "dev", task="ner").gate.baseline == "warn"
    prod = load_config(base, "prod", task="ner").gate
    assert prod.baseline == "require" and prod.baseline_margin == 0.03


# The local small model's aids (configs/env/local.yaml's tasks sections): what they turn on, and what is off without.
SMALL_MODEL_AIDS = {"char_ngram_buckets": 0, "char_ngram_min_count": 0, "char_ngram_trigrams": False,
                    "wide_scores": False, "baseline_product": 0.0}  # fmt: skip


@pytest.mark.parametrize("task", ["sentiment", "ner", "text-matching"])
def test_production_runs_the_plain_recipe_and_the_aids_stay_local(project_root: Path, task: str) -> None:
    """#61 item 5: the n-gram tables, the wide half and the CRF baseline folded in were measured on the local small
    model only, so every environment but local fine-tunes with the task file's plain recipe (production: ERNIE 3.0
    with PaddleNLP's recipe, the ERNIE-CRF head for NER), and no distillation anywhere by default."""
    base = project_root / "configs/pipeline.yaml"
    for env in ("dev", "prod"):
        cfg = load_config(base, env, task=task)
        assert {key: getattr(cfg.model, key) for key in SMALL_MODEL_AIDS} == SMALL_MODEL_AIDS, (env, task)
        assert cfg.training.distill_weight == 0.0
        assert cfg.model.crf_head is (task == "ner") and not cfg.model.tag_transitions
    prod = load_config(base, "prod", task=task).model
    assert prod.pretrained == "ernie-3.0-medium-zh" and not prod.scratch_if_unstaged
    local = load_config(base, "local", task=task).model
    if task != "text-matching":  # no corpus ships for it, so nothing was measured for it
        assert local.char_ngram_buckets and local.char_ngram_min_count == 2
    assert local.wide_scores is local.crf_head is (local.baseline_product > 0) is (task == "ner")


def test_config_shows_productions_plain_ner_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    """`paddle-mlops config --env prod --task ner` shows the plain ERNIE-CRF fine-tune."""
    assert main(["config", "--env", "prod", "--task", "ner"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert model["pretrained"] == "ernie-3.0-medium-zh" and model["crf_head"] is True
    assert {key: model[key] for key in SMALL_MODEL_AIDS} == SMALL_MODEL_AIDS


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("tasks:\n  nerr:\n    gate: {baseline: require}\n", ["local.yaml", "'tasks.nerr'", "known: ner, sentiment"]),
        ("tasks: [ner]\n", ["local.yaml", "'tasks' must map task names", "not a list"]),
        ("tasks:\n  ner: require\n", ["'tasks.ner' must be a mapping", "not a str"]),
        ("tasks:\n  ner:\n    gate: {baseline: always}\n", ["local.yaml", "'gate.baseline'", "'always'"]),
    ],
)
def test_a_bad_tasks_section_names_the_file_and_key(
    project_root: Path, tmp_path: Path, section: str, expected: list[str]
) -> None:
    configs = tmp_path / "configs"
    (configs / "env").mkdir(parents=True)
    (configs / "tasks").mkdir()
    (configs / "pipeline.yaml").write_text("{}\n")
    for task in ("sentiment", "ner"):
        (configs / "tasks" / f"{task}.yaml").write_text((project_root / f"configs/tasks/{task}.yaml").read_text())
    (configs / "env" / "local.yaml").write_text("gate: {baseline: warn}\n" + section)
    with pytest.raises(ConfigError) as err:
        load_config(configs / "pipeline.yaml", "local", task="ner")
    for text in expected:
        assert text in str(err.value)


def _leaves(node: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _at(data: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def test_pipeline_yaml_sets_only_site_choices_and_no_defaults(project_root: Path) -> None:
    """The models hold the only defaults: the base YAML overrides none of them and repeats none."""
    path = project_root / "configs/pipeline.yaml"
    base = read_yaml(path)
    defaults = PipelineConfig().model_dump()
    configured = PipelineConfig.model_validate(base).model_dump()
    problems = []
    for key, value in _leaves(base):
        if not key.startswith(SITE_CHOICES):
            problems.append(
                f"{key}: {value!r} is not a site choice; change its default in paddle_mlops_core/config/ "
                "(or set it per environment in configs/env/*.yaml) and delete it here. If it really depends "
                "on the site, add it to SITE_CHOICES in tests/test_config.py."
            )
        elif _at(configured, key) == _at(defaults, key):
            problems.append(f"{key}: {value!r} repeats the default in paddle_mlops_core/config/; delete it here.")
    assert not problems, f"{path}:\n" + "\n".join(problems)


def test_models_are_frozen(project_root: Path) -> None:
    cfg = load_config(project_root / "configs/pipeline.yaml")
    with pytest.raises(ValidationError):
        cfg.training.epochs = 3  # type: ignore[misc]


def test_teams_and_regions_load(project_root: Path) -> None:
    teams = load_teams(project_root / "configs")
    regions = load_regions(project_root / "configs")
    assert teams["nlp"].quota.gpu == 8 and teams["nlp"].priority.name == "team-nlp-training"
    assert regions["cn-east"].node_selector() == {"region": "cn-east", "gpu-type": "v100", "cost-tier": "spot"}


@pytest.mark.parametrize(
    "ref,ok",
    [
        ("repo/img:1.2.3", True),
        ("repo/img@sha256:" + "a" * 64, True),
        ("repo/img:latest", False),
        ("repo/img", False),
        ("localhost:5000/img", False),
    ],
)
def test_images_must_be_pinned(ref: str, ok: bool) -> None:
    if ok:
        assert check_pinned_image(ref) == ref
    else:
        with pytest.raises(ValueError):
            check_pinned_image(ref)


def _write(tmp_path: Path, text: str) -> Path:
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(text, encoding="utf-8")
    return cfg


@pytest.mark.parametrize(
    "content,expected",
    [
        ("training:\n  epochz: 3\n", ["unknown key 'training.epochz'", "Allowed keys here: epochs"]),
        ("training:\n  epochs: many\n", ["'training.epochs'", "valid integer", "'many'"]),
        ("gate:\n  metric: recall\n", ["'gate.metric'", "accuracy, macro_f1"]),
        ("images:\n  train: repo/train:latest\n", ["'images.train'", ":latest"]),
        ("training: [1, 2\n", ["is not valid YAML", "line"]),
    ],
)
def test_bad_config_names_file_and_field(tmp_path: Path, content: str, expected: list[str]) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message


@pytest.mark.parametrize(
    "content,argv_extra,fragments",
    [
        ("training:\n  epochz: 3\n", [], ["unknown key 'training.epochz'"]),
        ("serving:\n  port: eighty\n", [], ["'serving.port'", "valid integer"]),
        (None, [], ["does not exist"]),
        ("{}\n", ["--set", "model.hidden_size=abc"], ["'model.hidden_size'", "--set model.hidden_size=abc"]),
        ("{}\n", ["--env", "staging"], ["Environment 'staging'", "Known environments"]),
    ],
)
def test_cli_bad_config_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, argv_extra: list[str], fragments: list[str]
) -> None:
    path = tmp_path / "missing.yaml" if content is None else _write(tmp_path, content)
    code = main(["config", "--config", str(path), *argv_extra])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert str(path) in err or "Environment" in err
    for fragment in fragments:
        assert fragment in err


def test_bad_set_syntax(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--config", str(_write(tmp_path, "{}\n")), "--set", "training.epochs"]) == 2
    assert "a.b.c=value" in capsys.readouterr().err
