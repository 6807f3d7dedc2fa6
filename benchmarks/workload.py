"""The benchmarks' workload: the ERNIE classifier they serve and the texts they send it.

One ERNIE 3.0-medium-sized classifier (random weights, exported the way the train step exports) and texts of
common CJK characters, one token each, so a text's length in tokens is known before it is sent. Shared by
benchmarks/serving.py, benchmarks/serving_path.py and benchmarks/engines.py, so all three measure the same model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from paddle_mlops_core.config.inputs import ModelConfig

# CJK ranges that ErnieTokenizer splits into one token per character.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF))


@dataclass(frozen=True)
class Shape:
    """The classifier's size: what `export_model` builds and the texts' sequence length."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    seq_len: int

    def describe(self) -> str:
        return (
            f"hidden {self.hidden}, {self.layers} layers, {self.heads} heads, intermediate {self.intermediate}, "
            f"vocab {self.vocab}, seq {self.seq_len}"
        )


MEDIUM = Shape(hidden=768, layers=6, heads=12, intermediate=3072, vocab=40_000, seq_len=64)
TINY = Shape(hidden=32, layers=1, heads=2, intermediate=64, vocab=2_000, seq_len=64)


def cjk_chars(n: int) -> list[str]:
    chars: list[str] = []
    for lo, hi in CJK_RANGES:
        chars.extend(chr(cp) for cp in range(lo, min(hi + 1, lo + n - len(chars))))
        if len(chars) >= n:
            break
    return chars


def export_model(shape: Shape, directory: Path) -> Path:
    """A random-weight ERNIE classifier of `shape`, exported the way the train step exports."""
    # Paddle and the model code take seconds to import; only an export needs them (not a --help, not a client).
    import paddle

    from steps.runtime.data import labelled_text
    from steps.runtime.weights import ernie

    directory.mkdir(parents=True, exist_ok=True)
    vocab_file = directory.parent / "vocab.txt"
    tokens = [*labelled_text.SPECIAL_TOKENS, *cjk_chars(shape.vocab - len(labelled_text.SPECIAL_TOKENS))]
    vocab_file.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    cfg = ModelConfig(
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_seq_len=shape.seq_len,
        dropout=0.0,
    )
    paddle.seed(0)
    tokenizer = ernie.load_tokenizer(vocab_file)
    model = ernie.build_model(cfg, len(tokenizer.vocab), 2, tokenizer.pad_token_id)
    return ernie.export(model, tokenizer, {0: "negative", 1: "positive"}, cfg, directory)


def make_texts(n: int, length: int, seed: int = 0) -> list[str]:
    """Texts of `length` common CJK characters: `length` + [CLS] + [SEP] tokens."""
    rng = random.Random(seed)
    pool = cjk_chars(3000)
    return ["".join(rng.choices(pool, k=length)) for _ in range(n)]
