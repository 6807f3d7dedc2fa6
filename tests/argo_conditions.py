"""Argo's resource-template success/failure evaluation, reimplemented for tests.

argo-workflows v4.1.2 workflow/executor/resource.go: each condition is parsed with Kubernetes'
`labels.Parse` (k8s.io/apimachinery v0.35 pkg/labels/selector.go), keys are looked up as gjson paths
in the resource's JSON (`gjsonLabels`), and `matchConditions` fails the step when ANY failure
requirement matches, then succeeds when ALL success requirements match, else keeps polling.
Only the gjson path forms a valid label key can spell are supported: dotted keys and array indexes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# apimachinery validation.IsQualifiedName: optional DNS-subdomain prefix and '/', then a name of
# at most 63 characters.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# selector.go lexer: these end an identifier.
_SPECIAL = re.compile(r"(!=|==|=|!|>|<|\(|\)|,|\s+)")


class SelectorError(ValueError):
    """labels.Parse would reject the condition (Argo then fails the step: "failed to parse")."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # exists, !, =, !=, in, notin, >, <
    values: tuple[str, ...] = ()

    def matches(self, doc: Any) -> bool:
        """apimachinery Requirement.Matches over gjsonLabels (Has = exists, Get = string value)."""
        found, value = gjson_get(doc, self.key)
        if self.op == "exists":
            return found
        if self.op == "!":
            return not found
        if self.op in ("=", "in"):
            return found and value in self.values
        if self.op in ("!=", "notin"):
            return not found or value not in self.values
        if not found:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        limit = int(self.values[0])
        return number > limit if self.op == ">" else number < limit


def _check_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if not _NAME.match(name) or len(name) > 63 or (prefix and (len(prefix) > 253 or not _PREFIX.match(prefix))):
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(f"invalid label value {value!r}")
    return value


def parse(selector: str) -> list[Requirement]:
    """labels.Parse: comma-separated requirements; raises SelectorError where Go returns an error."""
    tokens = [t for t in _SPECIAL.split(selector) if t and not t.isspace()]
    out: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(tokens):
            raise SelectorError(f"unexpected end of {selector!r}")
        i += 1
        return tokens[i - 1]

    while i < len(tokens):
        if tokens[i] == "!":
            take()
            out.append(Requirement(_check_key(take()), "!"))
        else:
            key = _check_key(take())
            if i >= len(tokens) or tokens[i] == ",":
                out.append(Requirement(key, "exists"))
            else:
                op = take()
                if op in ("in", "notin"):
                    if take() != "(":
                        raise SelectorError(f"expected '(' after {op} in {selector!r}")
                    values: list[str] = []
                    while (token := take()) != ")":
                        if token != ",":
                            values.append(_check_value(token))
                    out.append(Requirement(key, op, tuple(values)))
                elif op in ("=", "==", "!="):
                    out.append(Requirement(key, "=" if op == "==" else op, (_check_value(take()),)))
                elif op in (">", "<"):
                    value = take()
                    if not re.fullmatch(r"-?\d+", value):
                        raise SelectorError(f"{op} needs an integer, got {value!r}")
                    out.append(Requirement(key, op, (value,)))
                else:
                    raise SelectorError(f"unknown operator {op!r} in {selector!r}")
        if i < len(tokens):
            if take() != ",":
                raise SelectorError(f"expected ',' in {selector!r}")
    return out


def gjson_get(doc: Any, path: str) -> tuple[bool, str]:
    """gjson.GetBytes(json, path) for dotted keys and array indexes: (Exists(), String())."""
    current = doc
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, ""
    if isinstance(current, bool):
        return True, "true" if current else "false"
    return True, current if isinstance(current, str) else str(current)


def verdict(success: str, failure: str, doc: dict[str, Any]) -> str:
    """'failed', 'succeeded' or 'waiting', as matchConditions decides for one poll of `doc`."""
    fail_reqs = parse(failure) if failure else []
    success_reqs = parse(success) if success else []
    if any(r.matches(doc) for r in fail_reqs):
        return "failed"
    if all(r.matches(doc) for r in success_reqs):
        return "succeeded"
    return "waiting"
