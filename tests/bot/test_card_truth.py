"""What a card says is true at the moment it is drawn: what a click does, who decided, what was
paid of what was asked, and whether the customer was really told."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from refund_desk.bot.blocks import cards
from refund_desk.bot.outbox import enqueue_once
from refund_desk.customers import erasure
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, CustomerMessage, Job
from tests.bot.helpers import approve, review_case
from tests.fakes.receiver import Receiver
from tests.helpers import ACME, CUSTOMER
from tests.slack_helpers import SlackHarness, fixture


@pytest.fixture()
def receiver() -> Iterator[tuple[Receiver, str]]:
    fake = Receiver()
    url = fake.start()
    yield fake, url
    fake.stop()


@pytest.fixture()
def desk(any_db_url: str, slack_desk: Callable[..., SlackHarness]) -> SlackHarness:
    return slack_desk(
        any_db_url,
        ACME.read_text(),
        REFUND_DESK_WEBHOOK_SECRET="whsec-test",
        REFUND_DESK_ALLOW_PRIVATE_CALLBACKS="true",  # the receiver listens on loopback
    )


def _text(card: Any) -> str:
    return json.dumps(card.blocks)


def _decides(card: Any) -> str:
    """The card's "Decides:" line."""
    [line] = [line for line in _text(card).split("\\n") if "*Decides:*" in line]
    return line


def _click_says(desk: SlackHarness, user: str, action: str = "approve") -> str:
    """What the modal a click of `user`'s opens tells them (then they close it)."""
    desk.click(user, action, desk.buttons()[action])
    view = desk.opened(user)
    assert view is not None, "a click opens a modal made for whoever clicked"
    desk.slack.workspace.modals.pop(user)
    return str(view["blocks"][0]["text"]["text"])


def test_the_approve_confirm_says_what_this_persons_click_does(desk: SlackHarness) -> None:
    case_id = review_case(desk, "40.00", "50.00", chargebacks=1)  # tier 4: two of finance
    first = _click_says(desk, "U0FIN1")
    assert f"Case `{case_id}` (40.00 USD, damaged)" in first
    assert "You (<@U0FIN1>) decide as a finance approver, limit 5000.00 USD." in first
    assert "Approval 1 of 2: nothing is paid yet" in first and "Refunds" not in first
    approve(desk, "U0FIN1")
    card = desk.card()
    assert "Approval 1 of 2 by <@U0FIN1>" in _text(card)
    assert "<@U0FIN2>" in _decides(card) and "<@U0FIN1>" not in _decides(card)
    [line] = [m.text for m in desk.slack.thread(card) if "Approval 1 of 2" in m.text]
    assert line == "Approval 1 of 2 by <@U0FIN1>; still to decide: <@U0FIN2>."
    assert "Refunds 40.00 USD now to the customer's payment." in _click_says(desk, "U0FIN2")
    again = _click_says(desk, "U0FIN1")  # who approved already is told so, not promised money
    assert "Refunds" not in again and "You already approved this case" in again
    assert f"Case `{case_id}`" in again


def test_the_filer_is_not_among_who_decides_and_their_click_says_why(
    desk: SlackHarness,
) -> None:
    desk.slash("U0FIN1", "/refund")
    view = desk.slack.views[-1]
    typed = {
        "payment": desk.payment("900.00"),
        "email": CUSTOMER,
        "currency": "USD",
        "amount": "600.00",
        "reason": "damaged",
        "message": "Box crushed.",
    }
    desk.submit("U0FIN1", "file_case_modal", view["private_metadata"], typed)
    desk.settle()
    card = desk.card()
    assert "<@U0FIN2>" in _decides(card) and "<@U0FIN1>" not in _decides(card)
    said = _click_says(desk, "U0FIN1")
    assert "You filed this case" in said and "Refunds" not in said


def test_the_card_names_who_may_decide_and_after_a_decision_who_did(desk: SlackHarness) -> None:
    case_id = review_case(desk, "600.00", "900.00")
    before = _text(desk.card())
    assert "<@U0FIN1> <@U0FIN2>" in before and "Why a person" in before
    approve(desk, "U0FIN2")
    assert desk.get(case_id)["status"] == "refunded"
    after = desk.card()
    assert desk.slack.buttons(after) == {}
    assert "Refunded 600.00 USD by <@U0FIN2>" in _text(after)


def test_a_card_writes_every_time_one_way_and_a_decided_card_has_no_deadline(
    desk: SlackHarness,
) -> None:
    review_case(desk, "600.00", "900.00")
    assert "Decide by" in _text(desk.card())
    approve(desk, "U0FIN2")
    decided = _text(desk.card())
    assert "Decide by" not in decided and "Refunded 600.00 USD by <@U0FIN2>" in decided
    formats = re.findall(
        r"<!date\^\d+\^([^|]*)\|[A-Z][a-z]{2} \d{1,2}, \d{4} \d\d:\d\d UTC>", decided
    )
    assert formats == ["{date_short_pretty} {time}"], decided
    assert len(re.findall(r"<!date", decided)) == 1


def test_a_partial_refund_reads_of_what_was_asked_on_the_card_and_in_the_api(
    desk: SlackHarness,
) -> None:
    case_id = review_case(desk, "600.00", "900.00")
    desk.click("U0FIN1", "approve_partial", desk.buttons()["approve_partial"])
    [view] = desk.slack.views
    desk.submit(
        "U0FIN1", "partial_modal", view["private_metadata"], {"amount": "200.00", "reason": "Half"}
    )
    desk.settle()
    case = desk.get(case_id)
    assert case["status"] == "refunded"
    assert (case["amount"], case["requested_amount"], case["refunded_amount"]) == (
        "200.00",
        "600.00",
        "200.00",
    )
    assert case["partial"] is True
    card = desk.card()
    header = card.blocks[0]["text"]["text"]
    assert header == "Refunded 200.00 of 600.00 USD (partial)"
    assert "by <@U0FIN1>" in _text(card) and "note: Half" in _text(card)
    [paid] = [m.text for m in desk.slack.thread(card) if "Refunded" in m.text]
    assert paid.startswith(":white_check_mark: Refunded 200.00 of 600.00 USD (partial); Sandbox")
    assert ") (" not in paid, paid


def test_the_advisors_confidence_reads_in_words_never_a_percentage(desk: SlackHarness) -> None:
    review_case(desk, "600.00", "900.00")
    card = _text(desk.card())
    assert "%" not in card, card
    assert re.search(r"AI guess, (very likely|likely|possibly|a guess)_", card), card
    assert re.search(r"Advisory \(AI, offline; (very likely|likely|possibly|a guess) right", card)


def test_a_note_ending_in_a_full_stop_is_not_given_another(desk: SlackHarness) -> None:
    review_case(desk, "600.00", "900.00")
    desk.escalate("U0FIN1", desk.buttons()["escalate"], reason="Check with the courier first.")
    desk.settle()
    [line] = [m.text for m in desk.slack.thread(desk.card()) if "Escalated" in m.text]
    assert line.endswith("Check with the courier first.") and ".." not in line, line


def test_a_partial_amount_above_what_is_still_refundable_is_refused_on_the_field(
    desk: SlackHarness,
) -> None:
    payment = desk.payment("100.00")
    mind = "I changed my mind about it."
    first = desk.post(desk.request(payment, "60.00", message=mind)).json()
    second = desk.post(desk.request(payment, "50.00", message=mind)).json()
    desk.settle()
    assert first["status"] == second["status"] == "awaiting_approval"

    def card_of(amount: str) -> Any:
        return next(
            m
            for m in reversed(desk.slack.in_channel("C0REFUNDS"))
            if m.blocks and m.blocks[0]["text"]["text"].startswith(amount)
        )

    desk.approve("U0LEAD2", desk.slack.buttons(card_of("60.00"))["approve"], "C0REFUNDS")
    desk.settle()
    assert desk.get(first["id"])["status"] == "refunded"
    assert "still refundable 40.00 USD" in _text(card_of("50.00"))
    partial = desk.slack.buttons(card_of("50.00"))["approve_partial"]
    desk.click("U0LEAD2", "approve_partial", partial, "C0REFUNDS")
    view = desk.slack.views[-1]
    answer = desk.submit(
        "U0LEAD2", "partial_modal", view["private_metadata"], {"amount": "45.00", "reason": None}
    )
    assert answer.json()["response_action"] == "errors"
    assert "40.00 USD" in answer.json()["errors"]["amount"]
    assert "still refundable" in answer.json()["errors"]["amount"]
    assert desk.refusals(second["id"]) == [], "a typo is not a decision: no audit record"
    desk.submit(
        "U0LEAD2", "partial_modal", view["private_metadata"], {"amount": "40.00", "reason": None}
    )
    desk.settle()
    assert desk.get(second["id"])["status"] == "refunded"
    assert sum(r["amount"] for r in desk.refunds_at_processor(payment)) == 10000


def test_customer_told_only_when_a_message_was_delivered(
    desk: SlackHarness, receiver: tuple[Receiver, str]
) -> None:
    fake, url = receiver
    silent = review_case(desk, "600.00", "900.00")
    approve(desk, "U0FIN1")
    assert desk.get(silent)["status"] == "refunded"
    text = _text(desk.card())
    assert "Customer told" not in text
    assert "Not sent to the customer:* no customer channel is configured" in text

    told = review_case(desk, "700.00", "900.00", callback_url=f"{url}/outcome")
    approve(desk, "U0FIN1")
    assert desk.get(told)["status"] == "refunded"
    assert fake.requests, "the integrator's webhook received the outcome"
    text = _text(desk.card())
    assert "Customer told* (webhook): Your refund of 700.00 USD has been issued." in text


def test_escalate_asks_why_names_who_and_stops_at_the_managers(desk: SlackHarness) -> None:
    case_id = review_case(desk, "600.00", "900.00")
    desk.escalate("U0FIN1", desk.buttons()["escalate"], reason="Customer is a reseller")
    desk.settle()
    case = desk.get(case_id)
    assert case["escalation_level"] == 1
    card = _text(desk.card())
    assert "Escalated by <@U0FIN1>" in card and "Customer is a reseller" in card
    assert "<@U0MGR1>" in card.split("Why a person")[0], "the card names who decides now"
    thread = [m.text for m in desk.slack.thread(desk.card())]
    assert any("asked by <@U0FIN1>: Customer is a reseller" in t for t in thread)
    [dm] = [m for m in desk.slack.messages if m.channel == "D0MGR1"]
    desk.escalate("U0MGR1", desk.slack.buttons(dm)["escalate"], channel="D0MGR1")
    desk.settle()
    assert desk.get(case_id)["escalation_level"] == 1
    assert [r["payload"]["code"] for r in desk.refusals(case_id)] == ["top_of_chain"]


def _home(desk: SlackHarness, user: str) -> str:
    opened = fixture("app_home_opened.json")
    opened["event"]["user"] = user
    assert desk.event(opened).status_code == 200
    desk.settle()
    return str(desk.slack.home[user]["blocks"]).split("Recent decisions")[0]


def test_app_home_lists_only_what_the_viewer_may_decide(desk: SlackHarness) -> None:
    case_id = review_case(desk, "40.00", "50.00", chargebacks=1)  # tier 4: two of finance
    assert case_id in _home(desk, "U0FIN1") and case_id in _home(desk, "U0FIN2")
    approve(desk, "U0FIN1")
    assert case_id not in _home(desk, "U0FIN1"), "approved already: the other one decides"
    assert case_id in _home(desk, "U0FIN2")
    assert case_id not in _home(desk, "U0LEAD1"), "another group's case"


def test_app_home_shows_only_the_buttons_the_viewer_may_use_and_why_the_case_is_theirs(
    sqlite_url: str, slack_desk: Callable[..., SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, ACME.read_text().replace("limit: 500", "limit: 100"))
    case_id = review_case(desk, "150.00", "200.00")  # no rule: the support leads, limit 100
    home = json.loads(json.dumps(_home_blocks(desk, "U0LEAD2")))
    [actions] = [b for b in home if b.get("block_id") == f"decide-{case_id}"]
    shown = {e["action_id"] for e in actions["elements"]}
    assert shown == {"approve_partial", "deny", "escalate"}, "no Approve above their limit"
    said = json.dumps(home)
    assert "You (<@U0LEAD2>) decide as a support-leads approver, limit 100.00 USD." in said
    assert "Your approval limit is 100.00 USD; this case is 150.00 USD." in said
    manager = json.dumps(_home_blocks(desk, "U0MGR1"))
    assert case_id not in manager, "the managers come in only once it is escalated"


def _home_blocks(desk: SlackHarness, user: str) -> list[Any]:
    _home(desk, user)
    return list(desk.slack.home[user]["blocks"])


def test_app_home_shows_the_record_only_to_those_who_may_read_cases(desk: SlackHarness) -> None:
    """Recent decisions and the rules fired answer the same people as case details do."""
    case_id = review_case(desk, "600.00", "900.00")
    approve(desk, "U0FIN1")
    assert desk.get(case_id)["status"] == "refunded"
    for reader in ("U0FIN2", "U0LEAD1", "U0MGR1"):
        _home(desk, reader)
        shown = str(desk.slack.home[reader]["blocks"])
        assert "Recent decisions" in shown and case_id in shown and "Rules fired" in shown
    _home(desk, "U0STRANGER")
    shown = str(desk.slack.home["U0STRANGER"]["blocks"])
    assert case_id not in shown and "Recent decisions" not in shown and "`" not in shown
    assert "Rules fired" not in shown and "shown to the policy's leads" in shown


def test_refund_modal_keeps_what_was_typed_and_says_what_is_wrong_there(
    desk: SlackHarness,
) -> None:
    desk.slash("U0FIN1", "/refund")
    [view] = desk.slack.views
    modal = desk.slack.workspace.modals["U0FIN1"]
    typed = {
        "payment": "py_nope",
        "email": "ada@example.com",
        "currency": "USD",
        "amount": "12.50",
        "reason": "other",
        "message": "It never came",
    }
    answer = desk.submit("U0FIN1", "file_case_modal", view["private_metadata"], typed, modal.id)
    assert answer.json()["response_action"] == "update", "the modal stays open while checking"
    desk.settle()
    shown = json.dumps(desk.slack.workspace.modals["U0FIN1"].view)
    assert "not filed" in shown and "py_nope" in shown and "12.50" in shown
    assert "It never came" in shown
    assert not [m for m in desk.slack.ephemeral if "not filed" in m.text], "not in the channel"
    assert desk.counts()[0] == 0


def test_the_card_carries_the_ids_an_operator_searches_with(desk: SlackHarness) -> None:
    case_id = review_case(desk, "600.00", "900.00")
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        correlation = case.correlation_id
    ids = next(b for b in desk.card().blocks if b.get("block_id") == "ids")
    assert case_id in json.dumps(ids) and correlation in json.dumps(ids)


def test_delivered_slack_jobs_keep_none_of_the_customers_words(desk: SlackHarness) -> None:
    """A card quotes the customer; once Slack has it, the job that carried it keeps nothing,
    so an erasure leaves no copy in the jobs table (or in a backup of it)."""
    words = "marmalade jar from Zanzibar arrived shattered"
    review_case(desk, "600.00", "900.00", message=f"The {words}, please refund")
    approve(desk, "U0FIN2")
    erasure.erase_customer(desk.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
    desk.settle()
    with desk.runtime.db.read() as session:
        jobs = session.scalars(select(Job)).all()
        assert [(j.id, j.kind) for j in jobs if "Zanzibar" in json.dumps(j.payload)] == []


def test_a_card_is_redrawn_as_erased_when_its_customer_is_erased(desk: SlackHarness) -> None:
    review_case(desk, "600.00", "900.00", message="The blue vase arrived shattered")
    before = _text(desk.card())
    assert "a**@example.com" in before and "shattered" in before
    erasure.erase_customer(desk.runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)
    desk.settle()
    after = _text(desk.card())
    assert "erased" in after and "a**@example.com" not in after and "shattered" not in after


def test_an_erasure_rewrites_what_still_waits_to_be_sent(
    desk: SlackHarness, receiver: tuple[Receiver, str]
) -> None:
    """Slack is slow and the integrator's webhook is down when the customer is erased: the
    waiting card update and manager DM keep no rendered words and draw the erased card when
    they go; the waiting outcome message is withdrawn and never goes out."""
    fake, url = receiver
    fake.statuses = [503]
    words = "marmalade jar from Zanzibar"
    case_id = review_case(
        desk, "700.00", "900.00", message=f"The {words} arrived shattered",
        callback_url=f"{url}/outcome",
    )  # fmt: skip
    approve(desk, "U0FIN1")
    assert desk.get(case_id)["status"] == "refunded" and len(fake.requests) == 1  # the 503
    card = desk.card()
    runtime = desk.runtime
    with runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        ctx, _ = desk.surface.outbox._context(session, case)
        blocks = cards.blocks_json(cards.case_blocks(ctx, secret=runtime.desk.secret))
    assert words in json.dumps(blocks)
    with runtime.db.write() as session:
        waiting = [
            enqueue_once(session, "t:update", "chat.update", channel=card.channel, ts=card.ts,
                         text="card", blocks=blocks),
            enqueue_once(session, "t:dm", "chat.postMessage", channel="U0MGR1", text="card",
                         remember={"case_id": case_id, "kind": "dm"}, blocks=blocks),
        ]  # fmt: skip

    erasure.erase_customer(runtime.desk, CUSTOMER, actor=Actor("cli", "t"), evidence=None)

    with runtime.db.read() as session:
        for job_id in waiting:
            job = session.get(Job, job_id)
            assert job is not None and job.status == "pending"
            assert words not in json.dumps(job.payload) and "a**@" not in json.dumps(job.payload)
        [told] = session.scalars(
            select(CustomerMessage).where(
                CustomerMessage.case_id == case_id,  # type: ignore[arg-type]
                CustomerMessage.direction == "out",  # type: ignore[arg-type]
            )
        ).all()
        assert told.status == "withdrawn" and told.body == ""
    desk.sweep()
    assert len(fake.requests) == 1, "the outcome went out after the erasure"
    after = _text(desk.card())
    assert "erased" in after and words not in after and "withdrawn" in after
    [dm] = [m for m in desk.slack.messages if m.channel == "D0MGR1"]
    assert "erased" in _text(dm) and words not in _text(dm)
    with runtime.db.read() as session:
        assert all(session.get(Job, j).status == "done" for j in waiting)  # type: ignore[union-attr]
