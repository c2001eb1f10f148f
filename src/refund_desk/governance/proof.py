"""What a new version loosens, proved before it is published: the prover in the publish gate.

A proof is pure CPU (no network, no database), but it can take seconds, so the result is kept
per pair of texts: the backtest step proves ahead, and the publish finds the answer waiting.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlmodel import Session

from refund_desk.governance.versions import control
from refund_desk.policy.prove import ProofReport, prove
from refund_desk.storage.models import PolicyVersion
from refund_desk.text import Code, Text, text


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


def proof_summary(version: int, report: ProofReport, new: str = "FILE") -> Text:
    """One plain line for people: looser or not, and how many kinds of request differ
    (``new`` names the proved text in the `prove` command it suggests: a file, or ``vN``)."""
    looser = [r for r in report.regions if r.permissive]
    settings = [x for x in report.settings if x.permissive]
    caveat = "" if report.complete else " (partial analysis: not every rule could be read exactly)"
    if not report.more_permissive:
        if not report.regions:
            return text(f"Proved against v{version}: no request is decided differently{caveat}.")
        return text(
            f"Proved against v{version}: {len(report.regions)} kinds of request are decided "
            f"differently, none more permissively{caveat}."
        )
    parts = []
    if looser:
        kinds = ", ".join(sorted({r.kind for r in looser}))
        parts.append(f"{len(looser)} kinds of request ({kinds})")
    if settings:
        parts.append(f"{len(settings)} settings")
    if not report.finished:
        parts.append("whatever the solver could not finish")
    return text(
        f"Proved against v{version}: more permissive for {' and '.join(parts)}{caveat}; ",
        Code(f"refund-desk policy prove v{version} {new}"),
        " shows each with an example.",
    )
