"""Instant evaluation of the PromQL subset the counter alerts use, over synthetic series.

prometheus/prometheus promql/functions.go `extrapolatedRate` (increase) and the set operators'
matching on all labels but `__name__` (promql/engine.go VectorOr / VectorUnless).
"""

from __future__ import annotations

import re

SELECTOR = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def parse_selector(selector: str) -> tuple[str, list[tuple[str, str, str]]]:
    """`name{l="v", m=~"r"}` -> (name, [(label, operator, value), ...]); a bare name has no matchers."""
    m = SELECTOR.fullmatch(selector)
    return (m.group(1), MATCHER.findall(m.group(2))) if m else (selector, [])


Sample = tuple[float, float]
_TOKENS = re.compile(r"\s*(\(|\)|\[[^\]]+\]|>|\d+[smhd]\b|[A-Za-z_:][\w:]*(?:\{[^}]*\})?|\d+(?:\.\d+)?)")
LOOKBACK = 300.0


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[duration[-1]]


class Evaluator:
    """Instant evaluation of the PromQL subset `_counted_in` writes: selectors, `offset`,
    `increase(sel[d])`, `> N`, `unless`, `or`, parentheses."""

    def __init__(self, series: dict[frozenset[tuple[str, str]], list[Sample]], at: float) -> None:
        self.series, self.at = series, at

    def run(self, expr: str) -> dict[frozenset[tuple[str, str]], float]:
        self.tokens = [t for t in _TOKENS.findall(expr) if t]
        assert re.sub(r"\s+", "", "".join(self.tokens)) == re.sub(r"\s+", "", expr), f"unsupported PromQL: {expr}"
        self.pos = 0
        out = self._or()
        assert self.pos == len(self.tokens)
        return out

    def _peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def _next(self) -> str:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _or(self) -> dict:
        left = self._unless()
        while self._peek() == "or":
            self._next()
            right = self._unless()
            seen = {_sig(k) for k in left}
            left = {**left, **{k: v for k, v in right.items() if _sig(k) not in seen}}
        return left

    def _unless(self) -> dict:
        left = self._cmp()
        while self._peek() == "unless":
            self._next()
            drop = {_sig(k) for k in self._cmp()}
            left = {k: v for k, v in left.items() if _sig(k) not in drop}
        return left

    def _cmp(self) -> dict:
        value = self._primary()
        if self._peek() == ">":
            self._next()
            limit = float(self._next())
            value = {k: v for k, v in value.items() if v > limit}
        return value

    def _primary(self) -> dict:
        token = self._next()
        if token == "(":
            value = self._or()
            assert self._next() == ")"
            return value
        if token == "increase":
            assert self._next() == "("
            selector, window = self._next(), _seconds(self._next()[1:-1])
            assert self._next() == ")"
            return self._increase(selector, window)
        offset = 0.0
        if self._peek() == "offset":
            self._next()
            offset = _seconds(self._next())
        return self._instant(token, self.at - offset)

    def _matching(self, selector: str):
        name, matchers = parse_selector(selector)
        for labels, samples in self.series.items():
            d = dict(labels)
            if d.get("__name__") == name and all(
                re.fullmatch(v if op == "=~" else re.escape(v), d.get(n, "")) for n, op, v in matchers
            ):
                yield labels, samples

    def _instant(self, selector: str, t: float) -> dict:
        out = {}
        for labels, samples in self._matching(selector):
            recent = [v for ts, v in samples if t - LOOKBACK < ts <= t]
            if recent:
                out[labels] = recent[-1]
        return out

    def _increase(self, selector: str, window: float) -> dict:
        """promql/functions.go extrapolatedRate(isCounter=true, isRate=false)."""
        out = {}
        start, end = self.at - window, self.at
        for labels, samples in self._matching(selector):
            points = [(ts, v) for ts, v in samples if start < ts <= end]
            if len(points) < 2:
                continue
            result = points[-1][1] - points[0][1]
            result += sum(prev for (_, prev), (_, cur) in zip(points, points[1:], strict=False) if cur < prev)
            sampled = points[-1][0] - points[0][0]
            to_start, to_end = points[0][0] - start, end - points[-1][0]
            average = sampled / (len(points) - 1)
            if result > 0 and points[0][1] >= 0:
                to_start = min(to_start, sampled * points[0][1] / result)
            limit = average * 1.1
            interval = (
                sampled + (to_start if to_start < limit else average / 2) + (to_end if to_end < limit else average / 2)
            )
            out[frozenset((k, v) for k, v in labels if k != "__name__")] = result * interval / sampled
        return out


def _sig(labels: frozenset[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in labels if k != "__name__")


def counter(name: str, born: float, increments: list[float], until: float, **labels: str):
    """A counter scraped every 30 s from its birth at 1 (Argo creates it at its first increment)."""
    key = frozenset({"__name__": name, **labels}.items())
    samples, value, t = [], 1.0, born
    while t <= until:
        value += sum(1 for i in increments if t - 30 < i <= t)
        samples.append((t, value))
        t += 30
    return key, samples
