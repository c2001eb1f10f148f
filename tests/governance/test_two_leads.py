"""Loosening always takes two leads; a confirmation confirms the text its giver was shown.

Driven through the governance functions the Slack surface calls (after its lead check), on the
real databases: a publish that widens authority, a rollback to a looser version, a second lead
confirming a draft that changed, and the switches (review rate, resume, mode).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk.cases.errors import InvalidRequest
from refund_desk.governance import admin
from refund_desk.governance.backtest import ensure_backtest
from refund_desk.governance.drafts import get_draft, save_draft
from refund_desk.governance.proof import proof_against_active
from refund_desk.governance.versions import control, publish
from refund_desk.policy.prove import render
from refund_desk.runtime import Runtime
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import AuditRecord
from tests.helpers import ACME, Harness

ADMIN = Actor("cli", "admin")
ONE, TWO, STRANGER = Actor("human", "U0LEAD1"), Actor("human", "U0LEAD2"), Actor("human", "U0X")
TWO_LEADS = ACME.read_text().replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
DAMAGED_UP_TO_400 = TWO_LEADS.replace("request.amount <= 50 and", "request.amount <= 400 and")
DAMAGED_UP_TO_40 = TWO_LEADS.replace("request.amount <= 50 and", "request.amount <= 40 and")


class Desk:
    """A runtime with a first version published by the admin, and the leads' levers."""

    def __init__(self, runtime: Runtime, first: str = TWO_LEADS) -> None:
        self.harness = Harness(runtime)
        self.db, self.audit = runtime.db, runtime.desk.audit
        with self.db.write() as session:
            publish(session, self.audit, source=first, actor=ADMIN)

    def run(self, fn: Any, actor: Actor, **kw: Any) -> str:
        """One change in its own transaction, as a lead's command; the reply as plain text."""
        with self.db.write() as session:
            return str(fn(session, self.audit, actor=actor, **kw).reply.as_text())

    def draft(self, source: str, actor: Actor = ONE, draft_id: int | None = None) -> int:
        with self.db.write() as session:
            draft, _ = save_draft(
                session, self.audit, source=source, actor=actor, draft_id=draft_id
            )
            ensure_backtest(session, self.audit, source=source, actor=actor)
            assert draft.id is not None
            return draft.id

    def preview(self, draft_id: int) -> str:
        with self.db.read() as session:
            return admin.preview_publish(session, draft_id=draft_id).as_text()

    def publish(self, draft_id: int, actor: Actor, confirm: str | None = None) -> str:
        """`publish dN confirm [HASH]`: without a hash, the form that names only the draft."""
        named = {} if confirm is None else {"confirm": confirm}
        return self.run(admin.publish_draft, actor, draft_id=draft_id, **named)

    def switches(self) -> Any:
        with self.db.read() as session:
            return control(session)

    def records(self, action: str) -> list[AuditRecord]:
        with self.db.read() as session:
            return list(
                session.scalars(
                    select(AuditRecord)
                    .where(col(AuditRecord.action) == action)
                    .order_by(col(AuditRecord.seq))
                ).all()
            )

    def damaged_case(self, amount: str) -> dict[str, Any]:
        harness = self.harness
        payment = harness.payment(amount)
        case_id = harness.post(harness.request(payment, amount)).json()["id"]
        harness.sweep(seconds_ahead=10)
        return {**harness.get(case_id), "paid": harness.refunds_at_processor(payment)}


def shown_hash(preview: str) -> str:
    """The hash a preview names in its `publish DRAFT confirm HASH`."""
    return preview.split(" confirm ")[-1].split("`")[0].split(".")[0].strip()


def proof_text(desk: Desk, draft_id: int) -> str:
    """The gate's proof of a draft against the active version, in full."""
    with desk.db.read() as session:
        proved = proof_against_active(session, get_draft(session, draft_id).source)
    assert proved is not None
    return render(proved[1])


# ---------------------------------------------------------------- 8: the proof covers authority


def test_a_lone_lead_cannot_publish_himself_into_the_managers(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    d1 = desk.draft(
        TWO_LEADS.replace("managers: {members: [U0MGR1]", "managers: {members: [U0MGR1, U0LEAD1]")
    )
    answer = desk.publish(d1, ONE)  # second-lead is off, as by default
    assert "Not published" in answer and desk.switches().active_version == 1
    assert "managers.members: U0MGR1 -> U0LEAD1, U0MGR1 (looser)" in proof_text(desk, d1)
    asked = desk.publish(d1, ONE, confirm=shown_hash(desk.preview(d1)))
    assert "needs a second lead (it is more permissive)" in asked
    assert desk.switches().active_version == 1
    assert "published d1" in desk.publish(d1, TWO, confirm=shown_hash(desk.preview(d1)))
    assert desk.switches().active_version == 2
    [confirmed] = desk.records("policy.change_confirmed")
    assert confirmed.actor_id == "U0LEAD2" and confirmed.payload["requested_by"] == "U0LEAD1"


def test_a_stranger_swapped_in_as_lead_cannot_be_the_second_lead(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    swapped = desk.draft(TWO_LEADS.replace("leads: [U0LEAD1, U0LEAD2]", "leads: [U0LEAD1, U0X]"))
    desk.publish(swapped, ONE)
    looser = desk.draft(DAMAGED_UP_TO_400)
    desk.publish(looser, ONE)
    desk.publish(looser, STRANGER)
    assert desk.switches().active_version == 1
    assert "leads: U0LEAD1, U0LEAD2 -> U0LEAD1, U0X (looser)" in proof_text(desk, swapped)
    asked = desk.publish(swapped, ONE, confirm=shown_hash(desk.preview(swapped)))
    assert "needs a second lead (it is more permissive)" in asked  # U0LEAD2 must agree
    assert desk.switches().active_version == 1


# ---------------------------------------------------------------- 9: a rollback loosens alone


def test_a_rollback_to_a_looser_version_needs_a_second_lead_and_keeps_its_proof(
    any_runtime: Runtime,
) -> None:
    desk = Desk(any_runtime, first=DAMAGED_UP_TO_400)
    tighter = desk.draft(TWO_LEADS)  # damaged orders pay themselves up to 50 only
    assert "published d1" in desk.publish(tighter, ONE)  # a tightening is one lead's
    assert desk.switches().active_version == 2

    asked = desk.run(admin.rollback, ONE, version=1)
    assert "needs a second lead (it is more permissive)" in asked
    assert "Proved against v2: more permissive" in asked
    assert desk.switches().active_version == 2 and desk.records("policy.rolled_back") == []
    with pytest.raises(InvalidRequest, match="another lead must confirm"):
        desk.run(admin.rollback, ONE, version=1)
    case = desk.damaged_case("300.00")
    assert case["status"] == "awaiting_approval" and case["paid"] == []

    assert "rolled back to v1" in desk.run(admin.rollback, TWO, version=1)
    assert desk.switches().active_version == 3
    [record] = desk.records("policy.rolled_back")
    proof = record.payload["proof"]
    assert proof["against"] == 2 and proof["more_permissive"] is True
    assert len(proof["hash"]) == 64
    assert desk.damaged_case("300.00")["paid"]  # now v1's text pays it


def test_a_rollback_shows_what_it_changes_before_a_second_lead_confirms_its_hash(
    any_runtime: Runtime,
) -> None:
    desk = Desk(any_runtime, first=DAMAGED_UP_TO_400)
    desk.publish(desk.draft(TWO_LEADS), ONE)  # a tightening: one lead's
    with desk.db.read() as session:
        shown = admin.preview_rollback(session, version=1, asker=ONE.id).as_text()
    said = shown.split("\n")
    assert said[0].startswith("Rolling back to v1 makes its text the live policy")
    assert said[1:3] == [
        "Changes from v2 to v1:",
        "~ “Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves” "
        "(damaged-small): when request.amount <= 50 → 400",
    ]
    assert "Proved against v2: more permissive (1 kind of request):" in said
    assert any(line.startswith("• Pays automatically: amount 50.01 to 400.00 USD") for line in said)
    assert (
        "Then a second lead confirms it (it is more permissive) with the same hash: U0LEAD2."
        in said
    )
    assert desk.switches().active_version == 2 and desk.records("policy.change_requested") == []
    digest = shown_hash(shown)
    with pytest.raises(InvalidRequest, match="names another text or state"):
        desk.run(admin.rollback, ONE, version=1, confirm="0" * 16)
    asked = desk.run(admin.rollback, ONE, version=1, confirm=digest)
    assert f"U0LEAD2 confirms with /refund-policy rollback v1 confirm {digest}." in asked
    assert desk.switches().active_version == 2
    assert "rolled back to v1" in desk.run(admin.rollback, TWO, version=1, confirm=digest)
    assert desk.switches().active_version == 3


def test_a_rollback_to_a_tighter_version_is_one_leads_with_its_proof(
    any_runtime: Runtime,
) -> None:
    desk = Desk(any_runtime, first=DAMAGED_UP_TO_40)
    looser = desk.draft(TWO_LEADS)
    desk.publish(looser, ONE, confirm=shown_hash(desk.preview(looser)))
    desk.publish(looser, TWO, confirm=shown_hash(desk.preview(looser)))
    assert desk.switches().active_version == 2
    assert "rolled back to v1" in desk.run(admin.rollback, ONE, version=1)
    [record] = desk.records("policy.rolled_back")
    assert record.payload["proof"]["more_permissive"] is False


# ---------------------------------------------------------------- 10: a name, not a text


def test_a_second_lead_confirms_a_text_not_the_drafts_name(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    d1 = desk.draft(DAMAGED_UP_TO_40)
    seen = desk.preview(d1)  # lead 2 reads it: nowhere more permissive
    assert "Proved against v1: nowhere more permissive" in seen
    desk.draft(DAMAGED_UP_TO_400, draft_id=d1)  # lead 1 swaps in a looser text
    desk.publish(d1, ONE)
    answer = desk.publish(d1, TWO)  # the same command lead 2 meant for what they saw
    assert "Not published" in answer and desk.switches().active_version == 1
    assert len(desk.records("policy.published")) == 1


def test_a_confirmation_with_the_hash_of_an_older_text_is_refused(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    d1 = desk.draft(DAMAGED_UP_TO_40)
    seen = shown_hash(desk.preview(d1))
    desk.draft(DAMAGED_UP_TO_400, draft_id=d1)
    now = shown_hash(desk.preview(d1))
    assert "needs a second lead" in desk.publish(d1, ONE, confirm=now)
    with pytest.raises(InvalidRequest) as stale:
        desk.publish(d1, TWO, confirm=seen)
    assert stale.value.code == "stale_confirmation" and now in stale.value.message
    with pytest.raises(InvalidRequest) as bad:
        desk.publish(d1, TWO, confirm="abc")
    assert bad.value.code == "bad_confirmation"
    assert desk.switches().active_version == 1
    assert "published d1" in desk.publish(d1, TWO, confirm=now)  # what lead 2 has now seen


def test_a_request_bound_to_another_active_version_is_stale(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    d1, d2 = desk.draft(DAMAGED_UP_TO_400), desk.draft(DAMAGED_UP_TO_40)
    shown = shown_hash(desk.preview(d1))
    desk.publish(d1, ONE, confirm=shown)
    desk.publish(d2, ONE)  # a tightening: v2 at once
    assert desk.switches().active_version == 2
    with pytest.raises(InvalidRequest) as stale:
        desk.publish(d1, TWO, confirm=shown)  # what lead 1 asked for was against v1
    assert stale.value.code == "stale_confirmation"


# ---------------------------------------------------------------- 12: the switches


def test_a_lower_review_rate_takes_two_leads_whatever_the_setting(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)  # the policy re-checks 5% of automatic refunds
    assert "needs a second lead" in desk.run(admin.set_review_rate, ONE, rate=0.0)
    assert desk.switches().review_sample_rate is None
    assert "review sample to 0%" in desk.run(admin.set_review_rate, TWO, rate=0.0)
    assert desk.switches().review_sample_rate == 0.0
    assert "review sample to 100%" in desk.run(admin.set_review_rate, ONE, rate=1.0)  # tighter
    assert "needs a second lead" in desk.run(admin.set_review_rate, ONE, rate=None)


def test_with_second_lead_on_any_review_rate_change_needs_a_second_lead(
    any_runtime: Runtime,
) -> None:
    desk = Desk(any_runtime)
    desk.run(admin.set_second_lead, ONE, on=True)
    assert "needs a second lead" in desk.run(admin.set_review_rate, ONE, rate=0.0)
    assert desk.switches().review_sample_rate is None
    assert "needs a second lead" in desk.run(admin.set_review_rate, ONE, rate=1.0)
    assert "review sample to 100%" in desk.run(admin.set_review_rate, TWO, rate=1.0)


def test_with_second_lead_on_resume_needs_a_second_lead(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    desk.run(admin.set_second_lead, ONE, on=True)
    assert "paused execution" in desk.run(admin.set_paused, ONE, paused=True)  # one lead's
    assert "needs a second lead" in desk.run(admin.set_paused, ONE, paused=False)
    assert desk.switches().paused
    with pytest.raises(InvalidRequest, match="another lead must confirm"):
        desk.run(admin.set_paused, ONE, paused=False)
    assert "resumed execution" in desk.run(admin.set_paused, TWO, paused=False)
    assert not desk.switches().paused


def test_a_resume_request_does_not_outlive_its_pause(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    desk.run(admin.set_second_lead, ONE, on=True)
    desk.run(admin.set_paused, ONE, paused=True)
    desk.run(admin.set_paused, ONE, paused=False)  # a request
    with desk.db.write() as session:  # the admin resumes from the CLI, then a new pause
        admin.set_paused(session, desk.audit, paused=False, actor=ADMIN)
    desk.run(admin.set_paused, TWO, paused=True)
    assert "needs a second lead" in desk.run(admin.set_paused, TWO, paused=False)
    assert desk.switches().paused


def test_back_to_supervised_takes_two_leads_and_away_from_it_one(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime)
    assert "set the mode to approve-all" in desk.run(admin.set_mode, ONE, mode="approve-all")
    assert "needs a second lead" in desk.run(admin.set_mode, ONE, mode="supervised")
    assert desk.switches().mode == "approve-all"
    assert "set the mode to supervised" in desk.run(admin.set_mode, TWO, mode="supervised")


def test_the_cli_is_the_admins_and_not_gated(any_runtime: Runtime) -> None:
    desk = Desk(any_runtime, first=DAMAGED_UP_TO_40)
    desk.run(admin.set_second_lead, ONE, on=True)
    for change, kw in (
        (admin.set_review_rate, {"rate": 0.0}),
        (admin.set_mode, {"mode": "approve-all"}),
        (admin.set_paused, {"paused": True}),
        (admin.set_paused, {"paused": False}),
        (admin.set_second_lead, {"on": False}),
    ):
        assert "needs a second lead (" not in desk.run(change, ADMIN, **kw)
    switches = desk.switches()
    assert (switches.review_sample_rate, switches.mode) == (0.0, "approve-all")
    assert not switches.paused and not switches.publish_needs_second_lead
