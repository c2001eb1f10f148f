"""The operator's loop: whoever filed a case hears how it ended, a message shortcut files a
refund from a message, `/refund find` looks cases up, and modals use number and email inputs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from refund_desk.bot.listeners.refund_command import prefill
from tests.bot.helpers import approve, finance_case, typed
from tests.helpers import ACME, CUSTOMER
from tests.slack_helpers import SlackHarness, fixture

POLICY = ACME.read_text().replace(
    "leads: [U0LEAD1]", "leads: [U0LEAD1]\noperators: {members: [U0OPS1]}"
)


@pytest.fixture()
def desk(sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(sqlite_url, POLICY)


def _file(desk: SlackHarness, user: str, payment: str, amount: str) -> str:
    desk.slash(user, "/refund")
    view = desk.slack.views[-1]
    desk.submit(user, "file_case_modal", view["private_metadata"], typed(payment, amount))
    desk.settle()
    told = [m for m in desk.slack.ephemeral if m.to == user and "Filed case" in m.text]
    return told[-1].text.split("`")[1]


def _dms(desk: SlackHarness, user: str) -> list[str]:
    return [m.text for m in desk.slack.messages if m.channel == "D" + user[1:]]


def test_the_filer_hears_how_the_case_ended_with_a_link_to_its_thread(
    desk: SlackHarness,
) -> None:
    case_id = _file(desk, "U0OPS1", desk.payment("900.00"), "600.00")
    assert _dms(desk, "U0OPS1") == []  # waiting is not an end
    approve(desk, "U0FIN1")
    assert desk.get(case_id)["status"] == "refunded"
    [dm] = _dms(desk, "U0OPS1")
    assert case_id in dm and "was refunded" in dm
    assert "archives/C0FINANCE/p" in dm  # chat.getPermalink of the card


def test_the_filer_hears_of_a_denial_by_the_policy(desk: SlackHarness) -> None:
    payment = desk.payment("50.00")
    first = desk.post(desk.request(payment, "30.00", reason="damaged")).json()
    assert desk.get(first["id"])["status"] == "refunded"
    case_id = _file(desk, "U0OPS1", payment, "40.00")  # more than the 20.00 left to refund
    assert desk.get(case_id)["status"] == "denied"
    [dm] = _dms(desk, "U0OPS1")
    assert case_id in dm and "was denied" in dm


def test_the_message_shortcut_opens_refund_prefilled(desk: SlackHarness) -> None:
    payment = desk.payment("900.00")
    payload = fixture("message_action.json")
    payload["message"]["text"] = (
        f"Hi, {CUSTOMER} says the vase for {payment} arrived broken: $42.50"
    )
    payload["trigger_id"] = desk.slack.workspace.issue_trigger("U0OPS1")
    assert desk.interaction(payload).status_code == 200
    view = desk.slack.views[-1]
    assert view["callback_id"] == "file_case_modal" and view["private_metadata"] == "C0REFUNDS"
    initial = {
        b["block_id"]: b["element"].get("initial_value")
        or (b["element"].get("initial_option") or {}).get("value")
        for b in view["blocks"]
    }
    assert initial["payment"] == payment and initial["email"] == CUSTOMER
    assert (initial["amount"], initial["currency"], initial["reason"]) == (
        "42.50",
        "USD",
        "damaged",
    )


def test_prefill_reads_what_a_message_says() -> None:
    said = prefill("Order py_abc123 for bo@example.org, EUR 12.5 never arrived")
    assert said["payment"] == "py_abc123" and said["email"] == "bo@example.org"
    assert (said["currency"], said["amount"], said["reason"]) == ("EUR", "12.5", "not_received")
    assert "payment" not in prefill("hello there")


def test_refund_find_lists_cases_for_the_people_who_may_read(desk: SlackHarness) -> None:
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    desk.settle()
    for needle in (CUSTOMER, payment, case_id):
        found = desk.slash("U0OPS1", "/refund", f"find {needle}").text
        assert case_id in found, needle
    assert "No case matches" in desk.slash("U0FIN1", "/refund", "find nobody@example.com").text
    refused = desk.slash("U0STRANGER", "/refund", f"find {CUSTOMER}").text
    assert case_id not in refused and "may look up cases" in refused


def test_modals_use_number_and_email_inputs_and_refund_takes_the_amount_as_typed(
    desk: SlackHarness,
) -> None:
    desk.slash("U0OPS1", "/refund")
    types = {b["block_id"]: b["element"]["type"] for b in desk.slack.views[-1]["blocks"]}
    # /refund's amount is text the app checks: empty there means what is left to refund, so
    # letters must reach the app, not arrive as an empty number (test_refund_filing.py)
    assert types["amount"] == "plain_text_input" and types["email"] == "email_text_input"
    finance_case(desk)
    desk.click("U0FIN1", "approve_partial", desk.buttons()["approve_partial"])
    partial = desk.slack.views[-1]
    assert partial["callback_id"] == "partial_modal"
    [amount] = [b for b in partial["blocks"] if b["block_id"] == "amount"]
    assert amount["element"]["type"] == "number_input"


def test_app_home_shows_the_queue_with_the_cards_buttons_and_they_decide(
    desk: SlackHarness,
) -> None:
    case_id = finance_case(desk)
    opened = fixture("app_home_opened.json")  # U0FIN1's home
    desk.event(opened)
    desk.settle()
    home = desk.slack.home["U0FIN1"]
    [actions] = [b for b in home["blocks"] if b.get("block_id") == f"decide-{case_id}"]
    buttons = {e["action_id"]: e["value"] for e in actions["elements"]}
    assert set(buttons) == {"approve", "approve_partial", "deny", "escalate"}
    payload = fixture("block_actions.json")  # a click in App Home: a view, no channel
    payload.pop("channel")
    payload.pop("message")
    payload["container"] = {"type": "view", "view_id": "VHOME"}
    payload["user"]["id"] = "U0FIN1"
    payload["trigger_id"] = desk.slack.workspace.issue_trigger("U0FIN1")
    payload["actions"][0].update(action_id="approve", value=buttons["approve"])
    assert desk.interaction(payload).status_code == 200
    confirm = desk.opened("U0FIN1")  # what this click does, said to the one who clicked
    assert confirm is not None and confirm["callback_id"] == "approve_modal"
    assert "Refunds 600.00 USD now" in str(confirm["blocks"])
    desk.submit("U0FIN1", "approve_modal", confirm["private_metadata"], {})
    desk.settle()
    assert desk.get(case_id)["status"] == "refunded"
    refreshed = str(desk.slack.home["U0FIN1"]["blocks"])
    assert f"decide-{case_id}" not in refreshed  # the home was published again
