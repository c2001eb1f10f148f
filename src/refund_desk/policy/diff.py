"""Rule-level differences between two policy documents, for people deciding on a publish.

A text diff of YAML shows moved lines and comments; a lead needs to know which rules were
added, removed, changed (and in which field) or moved, since the first match decides.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from refund_desk.policy.schema import PolicyDocument, Rule
from refund_desk.text import Code, Text, lines, text

RULE_FIELDS = ("when", "outcome", "tier", "approvers", "say")


@dataclass(frozen=True)
class Change:
    """One change: ``kind`` is added, removed, changed, moved or setting."""

    kind: str
    name: str
    detail: str


def diff_policies(old: PolicyDocument, new: PolicyDocument) -> list[Change]:
    """Rules first (in the new order), then the default, then every other setting."""
    before = {r.id: (i, r) for i, r in enumerate(old.rules)}
    after = {r.id: (i, r) for i, r in enumerate(new.rules)}
    shared = before.keys() & after.keys()
    changes: list[Change] = []
    for rule_id, (i, rule) in after.items():
        if rule_id not in before:
            changes.append(Change("added", rule_id, _describe(rule)))
            continue
        j, previous = before[rule_id]
        changes += _fields("changed", rule_id, previous, rule)
        if _rank(old, rule_id, shared) != _rank(new, rule_id, shared):
            changes.append(Change("moved", rule_id, f"position {j + 1} -> {i + 1}"))
    for rule_id, (_, rule) in before.items():
        if rule_id not in after:
            changes.append(Change("removed", rule_id, _describe(rule)))
    changes += _fields("changed", "default", old.default, new.default)
    skip = {"rules", "default", "tests"}
    old_data, new_data = old.model_dump(mode="json"), new.model_dump(mode="json")
    for key in new_data:
        if key not in skip and old_data.get(key) != new_data.get(key):
            changes.append(
                Change("setting", key, f"{_short(old_data.get(key))} -> {_short(new_data[key])}")
            )
    if old.tests != new.tests:
        changes.append(Change("setting", "tests", f"{len(old.tests)} -> {len(new.tests)} tests"))
    return changes


def _rank(doc: PolicyDocument, rule_id: str, common: AbstractSet[str]) -> int:
    """Position among the rules both versions share: moves, not insertions, count."""
    order = [r.id for r in doc.rules if r.id in common]
    return order.index(rule_id) if rule_id in order else -1


def _fields(kind: str, name: str, old: Any, new: Any) -> list[Change]:
    out = []
    for field in RULE_FIELDS:
        a, b = getattr(old, field, None), getattr(new, field, None)
        if a != b:
            out.append(Change(kind, name, f"{field}: {_short(a)} -> {_short(b)}"))
    return out


def _describe(rule: Rule) -> str:
    return f"when {rule.when} -> {rule.outcome} (tier {rule.tier})"


def _short(value: Any, limit: int = 120) -> str:
    shown = "none" if value is None else str(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def diff_text(changes: list[Change], *, old: str, new: str) -> Text:
    """Lines for Slack and the CLI."""
    if not changes:
        return text(f"{old} and {new} decide alike: no rule or setting differs.")
    marks = {"added": "+", "removed": "-", "changed": "~", "moved": "↕", "setting": "•"}
    return lines(
        f"Changes from {old} to {new}:",
        *[text(f"{marks[c.kind]} {c.kind} ", Code(c.name), f": {c.detail}") for c in changes],
    )
