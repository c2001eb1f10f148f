"""Rule-level differences between two policy documents, for people deciding on a publish.

A text diff of YAML shows moved lines and comments; a lead needs to know which rules were
added, removed, changed (and in which field) or moved, since the first match decides.
``diff_policies`` is the record (kind, name, detail: the CLI's and MCP's JSON);
``diff_text`` says the same in words: rules by their descriptions, only the part of a
condition that changed ("when `request.amount <=` `50` → `80`"), people by name.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from refund_desk.policy.schema import Decides, PolicyDocument, Rule
from refund_desk.policy.words import (
    OUTCOME_DONE,
    decides,
    details,
    group,
    mentioning,
    named,
    people,
    rule_title,
    setting_name,
)
from refund_desk.text import Code, Text, join, lines, text

RULE_FIELDS = ("when", "outcome", "tier", "approvers", "say", "description")
MARKS = {"added": "+", "removed": "-", "changed": "~", "moved": "↕", "setting": "•"}


@dataclass(frozen=True)
class Change:
    """One change: ``kind`` is added, removed, changed, moved or setting."""

    kind: str
    name: str
    detail: str


@dataclass(frozen=True)
class _Said:
    """A change and its words."""

    change: Change
    words: Text


def diff_policies(old: PolicyDocument, new: PolicyDocument) -> list[Change]:
    """Rules first (in the new order), then the default, then every other setting."""
    return [said.change for said in _differences(old, new)]


def diff_text(old_doc: PolicyDocument, new_doc: PolicyDocument, *, old: str, new: str) -> Text:
    """The changes in words, one line each (an added rule has its details line)."""
    found = _differences(old_doc, new_doc)
    if not found:
        return text(f"{old} and {new} decide alike: no rule or setting differs.")
    return lines(
        f"Changes from {old} to {new}:",
        *[text(MARKS[s.change.kind], " ", s.words) for s in found],
    )


def _differences(old: PolicyDocument, new: PolicyDocument) -> list[_Said]:
    before = {r.id: (i, r) for i, r in enumerate(old.rules)}
    after = {r.id: (i, r) for i, r in enumerate(new.rules)}
    shared = before.keys() & after.keys()
    out: list[_Said] = []
    for rule_id, (i, rule) in after.items():
        if rule_id not in before:
            words = lines(
                text("New rule ", rule_title(rule), f" at position {i + 1}: ", decides(new, rule)),
                text("    ", details(rule)),
            )
            out.append(_Said(Change("added", rule_id, _describe(rule)), words))
            continue
        j, previous = before[rule_id]
        out += _fields(rule_id, rule_title(rule), (old, previous), (new, rule))
        if _rank(old, rule_id, shared) != _rank(new, rule_id, shared):
            words = text(
                rule_title(rule),
                f" moved from position {j + 1} to {i + 1} (the first rule that matches decides)",
            )
            out.append(_Said(Change("moved", rule_id, f"position {j + 1} -> {i + 1}"), words))
    for rule_id, (_, rule) in before.items():
        if rule_id not in after:
            words = text("Removed rule ", rule_title(rule), " (it was: ", decides(old, rule), ")")
            out.append(_Said(Change("removed", rule_id, _describe(rule)), words))
    out += _fields("default", text("the default"), (old, old.default), (new, new.default))
    out += _settings(old, new)
    if old.tests != new.tests:
        detail = f"{len(old.tests)} -> {len(new.tests)} tests"
        count = f"{len(old.tests)} → {len(new.tests)}"
        words = text("embedded tests: ", "changed" if len(old.tests) == len(new.tests) else count)
        out.append(_Said(Change("setting", "tests", detail), words))
    return out


def _rank(doc: PolicyDocument, rule_id: str, common: AbstractSet[str]) -> int:
    """Position among the rules both versions share: moves, not insertions, count."""
    order = [r.id for r in doc.rules if r.id in common]
    return order.index(rule_id) if rule_id in order else -1


def _fields(
    name: str,
    title: Text,
    old: tuple[PolicyDocument, Decides],
    new: tuple[PolicyDocument, Decides],
) -> list[_Said]:
    out = []
    for field in RULE_FIELDS:
        a, b = getattr(old[1], field, None), getattr(new[1], field, None)
        if a != b:
            detail = f"{field}: {_short(a)} -> {_short(b)}"
            words = text(title, ": ", _field_words(field, a, b, old[0], new[0]))
            out.append(_Said(Change("changed", name, detail), words))
    return out


def _field_words(field: str, a: Any, b: Any, old: PolicyDocument, new: PolicyDocument) -> Text:
    if field == "when":
        return when_change(str(a), str(b))
    if field == "outcome":
        return text(f"{OUTCOME_DONE[a]} → {OUTCOME_DONE[b]}")
    if field == "tier":
        return text(f"tier {a} → {b}")
    if field == "approvers":
        return text("approvers ", group(old, a), " → ", group(new, b))
    said = {"say": "tells the customer", "description": "description"}[field]
    return text(f"{said} {_quoted(a)} → {_quoted(b)}")


def _quoted(value: Any) -> str:
    return "nothing" if value is None else f"“{_short(value)}”"


def _describe(rule: Rule) -> str:
    return f"when {rule.when} -> {rule.outcome} (tier {rule.tier})"


def _short(value: Any, limit: int = 120) -> str:
    shown = "none" if value is None else str(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# --------------------------------------------------------------------- a condition's change

_TOKEN = re.compile(
    r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\d+(?:\.\d+)?|[A-Za-z_][\w.]*|[=!<>]=|&&|\|\||\S"
)
_CLAUSE_EDGE = {"and", "or", "&&", "||", "(", ")", ","}
MAX_CHANGED_TOKENS = 12


def when_change(old: str, new: str) -> Text:
    """Only what changed in a condition, with the words around it that say where:
    "when `request.amount <=` `50` → `80`", "when added `and order.age_days <= 30`"."""
    a, b = list(_TOKEN.finditer(old)), list(_TOKEN.finditer(new))
    start = 0
    while start < min(len(a), len(b)) and a[start][0] == b[start][0]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end][0] == b[-1 - end][0]:
        end += 1
    gone, came = a[start : len(a) - end], b[start : len(b) - end]
    if not gone and not came:
        return text("when: only its spacing changed")
    if max(len(gone), len(came)) > MAX_CHANGED_TOKENS:
        return text("when ", Code(old), " → ", Code(new))
    lead = _span(old, a[_clause_start(a, start) : start])
    tail = _span(old, a[len(a) - end : _clause_end(a, len(a) - end)])
    if not gone:
        return text("when ", _where(lead), "added ", Code(_span(new, came)))
    if not came:
        return text("when ", _where(lead), "removed ", Code(_span(old, gone)))
    shown: list[Any] = ["when "]
    if lead:
        shown += [Code(lead), " "]
    shown += [Code(_span(old, gone)), " → ", Code(_span(new, came))]
    if tail:
        shown += [" ", Code(tail)]
    return text(*shown)


def _where(lead: str) -> Text:
    return text("after ", Code(lead), ": ") if lead else text()


def _clause_start(tokens: list[re.Match[str]], at: int) -> int:
    while at > 0 and tokens[at - 1][0] not in _CLAUSE_EDGE:
        at -= 1
    return at


def _clause_end(tokens: list[re.Match[str]], at: int) -> int:
    while at < len(tokens) and tokens[at][0] not in _CLAUSE_EDGE:
        at += 1
    return at


def _span(source: str, tokens: list[re.Match[str]]) -> str:
    return source[tokens[0].start() : tokens[-1].end()] if tokens else ""


# --------------------------------------------------------------------- settings


def _settings(old: PolicyDocument, new: PolicyDocument) -> list[_Said]:
    """Every other setting: the record names the top-level key (as before); the words name
    each value that changed inside it, with people added and removed by name."""
    skip = {"rules", "default", "tests"}
    old_data, new_data = old.model_dump(mode="json"), new.model_dump(mode="json")
    out = []
    for key in new_data:
        if key in skip or old_data.get(key) == new_data.get(key):
            continue
        detail = f"{_short(old_data.get(key))} -> {_short(new_data[key])}"
        leaves = _leaves(key, old_data.get(key), new_data.get(key))
        words = join("; ", [_leaf_words(path, a, b, new.currency) for path, a, b in leaves])
        out.append(_Said(Change("setting", key, detail), words))
    return out


def _leaves(path: str, a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(path, old, new) for each value that differs, down through mappings."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in [*a, *[k for k in b if k not in a]]:
            if a.get(key) != b.get(key):
                out += _leaves(f"{path}.{key}", a.get(key), b.get(key))
        return out
    return [(path, a, b)]


def _leaf_words(path: str, a: Any, b: Any, currency: str) -> Text:
    name = setting_name(path)
    if isinstance(a, list | type(None)) and isinstance(b, list | type(None)):
        before, after = [str(x) for x in a or []], [str(x) for x in b or []]
        if a is not None or b is not None:
            added = [x for x in after if x not in before]
            removed = [x for x in before if x not in after]
            said = [
                *([text("added ", people(added))] if added else []),
                *([text("removed ", people(removed))] if removed else []),
            ]
            return text(name, ": ", join(", ", said) if said else "reordered")
    money = path.endswith(("limit", "max_amount_per_hour"))
    unit = f" {currency}" if money else ""
    return text(name, ": ", _value(a, unit), " → ", _value(b, unit))


def _value(value: Any, unit: str) -> Text:
    if value is None:
        return text("none")
    if isinstance(value, str):
        return text(named(value)) if unit == "" else text(value + unit)
    if isinstance(value, dict):
        return mentioning(_short(value))
    return text(f"{value}{unit}")
