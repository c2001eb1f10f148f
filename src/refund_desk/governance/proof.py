"""What a new version loosens, proved before it is published: the prover in the publish gate.

A proof is pure CPU (no network, no database), but it can take seconds, so the result is kept
per pair of texts: the backtest step proves ahead, and the publish finds the answer waiting.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlmodel import Session

from refund_desk.governance.versions import control
from refund_desk.policy.prove import ProofReport, Region, prove
from refund_desk.policy.schema import PolicyDocument
from refund_desk.policy.words import regions_words, setting_words
from refund_desk.storage.models import PolicyVersion
from refund_desk.text import Mark, Text, lines, text

MAX_LINES = 8
"""Ways of deciding differently a chat message lists (looser first); `prove` lists them all."""


@lru_cache(maxsize=32)
def proof_between(old_source: str, new_source: str) -> ProofReport:
    return prove(old_source, new_source)


def proof_against_active(session: Session, source: str) -> tuple[int, ProofReport] | None:
    """(active version, what ``source`` changes against it), or None with nothing published."""
    active = control(session).active_version
    row = session.get(PolicyVersion, active) if active else None
    if row is None:
        return None
    return row.version, proof_between(row.source, source)


def proof_record(proved: tuple[int, ProofReport] | None) -> dict[str, Any] | None:
    """What a publish's or rollback's audit record keeps of the proof: against what, its
    hash, the verdict."""
    if proved is None:
        return None
    version, report = proved
    return {"against": version, "hash": report.hash, "more_permissive": report.more_permissive}


def proof_summary(
    version: int, report: ProofReport, docs: tuple[PolicyDocument, PolicyDocument] | None = None
) -> Text:
    """What the proof found, for people: looser or not, then each kind of request that is
    decided differently, in words with one example each (looser ones first), and each
    changed setting with the people it adds or removes. ``docs`` (the active version's and
    the new text's) name the rules by their descriptions."""
    old, new = docs if docs is not None else (None, None)
    looser = [r for r in report.regions if r.permissive]
    other = [r for r in report.regions if not r.permissive]
    caveat = "" if report.complete else " (partial analysis: not every rule could be read exactly)"
    if not report.regions and not report.settings:
        return text(f"Proved against v{version}: no request is decided differently{caveat}.")
    if report.more_permissive:
        head = f"Proved against v{version}: more permissive ({_count(looser, report)}){caveat}:"
    else:
        head = f"Proved against v{version}: nowhere more permissive{caveat}:"
    said = regions_words([*looser, *other], old, new)
    return lines(
        head,
        *[text("• ", line) for line in said[:MAX_LINES]],
        f"• …and {len(said) - MAX_LINES} more" if len(said) > MAX_LINES else None,
        *[text("• ", setting_words(s)) for s in report.settings],
        None
        if report.finished
        else text(
            Mark("warning"),
            " The solver did not finish: requests may be missing, so it counts as looser.",
        ),
    )


def _count(looser: list[Region], report: ProofReport) -> str:
    settings = sum(1 for s in report.settings if s.permissive)
    parts = []
    if looser:
        parts.append(f"{len(looser)} kind{'s' if len(looser) != 1 else ''} of request")
    if settings:
        parts.append(f"{settings} setting{'s' if settings != 1 else ''}")
    return " and ".join(parts) or "the proof could not finish"
