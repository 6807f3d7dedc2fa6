"""The ERNIE-CRF head (`model.crf_head`, steps/runtime/weights/crf_head.py): the loss is the gold sequences' exact
negative log-likelihood, the learned transitions decode as the file's, and the train step exports them."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures_ernie import CONFIG, TINY_OVERRIDES, ner_corpus
from pydantic import ValidationError

from paddle_mlops_core.config.inputs import ModelConfig
from steps.runtime.data.tasks.base import IGNORE_INDEX
from steps.runtime.data.tasks.ner import decode_tags

ROOT = Path(__file__).resolve().parents[1]

paddle = pytest.importorskip("paddle")
from steps.runtime.training import optimization  # noqa: E402
from steps.runtime.weights import crf_head  # noqa: E402


class _Bare(paddle.nn.Layer):
    pass


def _crf(transitions: np.ndarray) -> object:
    model = crf_head.attach(_Bare(), len(transitions))
    model.crf.transitions.set_value(paddle.to_tensor(transitions.astype("float32")))
    return model.crf


def _brute_nll(emissions: np.ndarray, tags: list[int], transitions: np.ndarray) -> float:
    """−log P(tags | emissions) by enumerating every tag sequence."""

    def score(path: tuple[int, ...] | list[int]) -> float:
        return sum(emissions[i, t] for i, t in enumerate(path)) + sum(
            transitions[a, b] for a, b in itertools.pairwise(path)
        )

    n = len(transitions)
    log_z = np.log(sum(np.exp(score(p)) for p in itertools.product(range(n), repeat=len(tags))))
    return float(log_z - score(tags))


def test_the_loss_is_the_exact_likelihood_per_tagged_character() -> None:
    rng = np.random.default_rng(0)
    transitions = rng.normal(size=(3, 3))  # not symmetric: from and to must not be swapped anywhere
    logits = rng.normal(size=(3, 7, 3)).astype("float32")
    x = IGNORE_INDEX
    targets = np.array([[x, 0, 2, 1, x, x, x], [x, 1, 1, 1, 1, 2, x], [x, x, x, x, x, x, x]])  # the last: no characters
    got = float(crf_head.loss(_crf(transitions), paddle.to_tensor(logits), paddle.to_tensor(targets)))
    e = logits.astype("float64")
    want = (_brute_nll(e[0, 1:4], [0, 2, 1], transitions) + _brute_nll(e[1, 1:6], [1, 1, 1, 1, 2], transitions)) / 8
    assert got == pytest.approx(want, rel=1e-5)


def test_paddlenlp_s_own_normaliser_reads_the_transitions_transposed() -> None:
    """Why crf_head computes the normaliser itself: paddlenlp 2.8.1 paddlenlp/layers/crf.py `LinearChainCrf.forward`
    sums `transitions[to, from]` (mat = emission[:, to, None] + transitions + alpha[:, None, from], log-summed over
    the last axis), while its `gold_score` and `ViterbiDecoder` read `transitions[from, to]`
    (PaddlePaddle/PaddleNLP#1401). If an upgrade makes the two agree, this fails: use `LinearChainCrfLoss` then."""
    rng = np.random.default_rng(1)
    transitions = rng.normal(size=(4, 4))
    emissions = paddle.to_tensor(rng.normal(size=(2, 5, 4)).astype("float32"))
    lengths = paddle.to_tensor(np.array([5, 3]))
    crf = _crf(transitions)
    theirs = crf(emissions, lengths).numpy()
    ours = crf_head.normaliser(crf.transitions, emissions, lengths).numpy()
    transposed = crf_head.normaliser(paddle.to_tensor(transitions.T.astype("float32")), emissions, lengths).numpy()
    np.testing.assert_allclose(theirs, transposed, rtol=1e-5)
    assert np.abs(theirs - ours).max() > 1e-2


def test_learned_transitions_decode_what_the_characters_alone_cannot() -> None:
    """Tags O, B-PER, I-PER; the middle character of each name is ambiguous on its own (equal B/I scores). Training
    only the transitions on such sequences teaches B-PER → I-PER, and the decoder then reads the names whole."""
    names = ["O", "B-PER", "I-PER"]
    emissions = np.log(np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.4, 0.4], [0.8, 0.1, 0.1]]))
    gold = [0, 1, 2, 0]
    assert decode_tags(np.exp(emissions), names) != gold  # without transitions: two one-character names
    crf = _crf(np.zeros((3, 3)))
    optimizer = paddle.optimizer.Adam(learning_rate=0.1, parameters=[crf.transitions])
    logits = paddle.to_tensor(np.concatenate([np.zeros((1, 3)), emissions])[None].astype("float32"))  # [CLS] first
    targets = paddle.to_tensor(np.array([[IGNORE_INDEX, *gold]]))
    first = None
    for _ in range(60):
        loss = crf_head.loss(crf, logits, targets)
        first = float(loss) if first is None else first
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
    assert float(crf_head.loss(crf, logits, targets)) < first / 2
    learned = crf.transitions.numpy().astype("float64")
    assert learned[1, 2] > learned[1, 1]  # a name goes on rather than starting again
    assert decode_tags(np.exp(emissions), names, learned) == gold


@pytest.mark.parametrize("encoder_rate", [3e-3, 5e-5])
def test_the_transitions_learn_at_their_own_rate_whatever_the_encoder_s(encoder_rate: float) -> None:
    """AdamW's first step moves a parameter by its learning rate: the transitions by CRF_RATE, the encoder's
    weights by the schedule's rate (a fine-tune of ERNIE 3.0 runs at 5e-5)."""
    model = crf_head.attach(paddle.nn.Linear(3, 3), 3)
    optimization.set_peak_rates(model, encoder_rate)
    optimizer = paddle.optimizer.AdamW(learning_rate=encoder_rate, parameters=model.parameters(), weight_decay=0.0)
    before = model.crf.transitions.numpy().copy(), model.weight.numpy().copy()
    logits = model(paddle.to_tensor(np.eye(3, dtype="float32")))[None]
    crf_head.loss(
        model.crf, paddle.concat([paddle.zeros([1, 1, 3]), logits], axis=1), paddle.to_tensor([[IGNORE_INDEX, 0, 1, 2]])
    ).backward()
    optimizer.step()
    moved = np.abs(model.crf.transitions.numpy() - before[0]).max(), np.abs(model.weight.numpy() - before[1]).max()
    assert moved[0] == pytest.approx(crf_head.CRF_RATE, rel=1e-3)
    assert moved[1] == pytest.approx(encoder_rate, rel=1e-3)


def test_a_crf_head_is_for_token_classification_only_and_replaces_counted_transitions() -> None:
    with pytest.raises(ValidationError, match="crf_head scores tag sequences"):
        ModelConfig(task="text-classification", crf_head=True)
    with pytest.raises(ValidationError, match="set tag_transitions to false"):
        ModelConfig(task="token-classification", crf_head=True, tag_transitions=True)
    assert ModelConfig(task="token-classification", crf_head=True).crf_head


@pytest.mark.slow
def test_the_train_step_learns_and_exports_the_crf_s_transitions(tmp_path: Path) -> None:
    """steps/train.py on a tiny People's Daily file in two processes under paddle.distributed.launch (DataParallel:
    the CRF loss is computed inside the module it wraps, crf_head.WithLoss; computed after its forward, the reducer
    had marked the transitions unused and both ranks failed at the first backward). The export's
    tag_transitions.json holds the learned scores, and a name's B-PER → I-PER scores above a jump from O into its
    middle."""
    from steps import prepare_data

    source = ner_corpus(tmp_path / "pd.txt")
    overrides = [
        *TINY_OVERRIDES,
        f"data.source={source}",
        "model.pretrained=null",
        "model.tag_transitions=false",
        "model.crf_head=true",
        "training.epochs=3",
        "training.learning_rate=0.01",
        "training.nproc=2",
    ]
    args = ["--config", CONFIG, "--env", "local", "--task", "ner", "--overrides", json.dumps(overrides)]
    ws = tmp_path / "ws"
    assert prepare_data.main([*args, "--output", str(ws / "data")]) == 0
    launcher = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cmd = [*launcher, "steps/train.py", *args, "--workspace", str(ws)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("workerlog.*")))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[-3000:]
    assert json.loads((ws / "model" / "training.json").read_text())["world_size"] == 2
    record = json.loads((ws / "model" / "tag_transitions.json").read_text(encoding="utf-8"))
    assert record["source"] == "learned" and set(record["dev"]) == {"0.0", "0.25", "0.5", "0.75", "1.0"}
    names, scores = record["labels"], np.asarray(record["log_probs"])
    assert scores.shape == (len(names), len(names)) and np.abs(scores).max() > 0.05  # it moved from its zero start
    b, i, o = names.index("B-PER"), names.index("I-PER"), names.index("O")
    assert scores[b, i] > scores[o, i]
    assert "dev_micro_f1_decoded" in json.loads((ws / "model" / "training.json").read_text())
