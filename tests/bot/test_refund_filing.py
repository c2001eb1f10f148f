"""`/refund` files exactly what the operator typed, and only their own filing:

- `/refund TEXT` opens the form filled in from what was typed (an amount, a payment id, an
  email, what happened); `/refund help` answers how, and opens nothing;
- an amount that is not an amount is refused on the modal's field, quoting what was typed in
  words a person reads, never read as "empty" (which means what is left on the payment);
- an absurd amount (more than the whole payment, more than money can hold) is refused with a
  clear error and nothing is filed;
- the filing job recognizes the case it filed by something only it writes, so a case planted
  with its external id (`slack-job-<id>`) is never reported to the operator as theirs, and a
  retried job still files once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk.bot.listeners.refund_command import FILE_CASE, file_case
from refund_desk.cases.intake import parse_request, submit
from refund_desk.jobs.queue import ClaimedJob, queue
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, Job
from tests.bot.helpers import typed
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness

OPERATOR = "U0OPS1"
POLICY = ACME.read_text().replace(
    "leads: [U0LEAD1]", "leads: [U0LEAD1]\noperators: {members: [U0OPS1]}"
)


@pytest.fixture()
def desk(any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(any_db_url, POLICY)


def file(desk: SlackHarness, values: dict[str, str | None]) -> dict[str, Any]:
    """Open `/refund` and submit it as Slack does; the answer to the submission."""
    desk.slash(OPERATOR, "/refund")
    view = desk.slack.views[-1]
    modal = desk.slack.workspace.modals[OPERATOR]
    answer = desk.submit(OPERATOR, "file_case_modal", view["private_metadata"], values, modal.id)
    assert answer.status_code == 200
    return dict(answer.json()) if answer.content else {}


def filing_jobs(desk: SlackHarness) -> int:
    with desk.runtime.db.read() as session:
        return int(
            session.scalar(select(func.count()).select_from(Job).where(col(Job.kind) == FILE_CASE))
            or 0
        )


def told(desk: SlackHarness) -> list[str]:
    return [m.text for m in desk.slack.ephemeral if m.to == OPERATOR]


def initial(view: dict[str, Any]) -> dict[str, str | None]:
    """What the modal shows in each field before anyone types."""
    return {
        b["block_id"]: b["element"].get("initial_value")
        or (b["element"].get("initial_option") or {}).get("value")
        for b in view["blocks"]
        if b.get("type") == "input"
    }


# ---------------------------------------------------------------- what follows /refund


def test_refund_with_text_opens_the_form_filled_in_from_it(desk: SlackHarness) -> None:
    payment = desk.payment("50.00")
    desk.slash(OPERATOR, "/refund", f"25 {payment} ada@example.com the vase arrived broken")
    shown = initial(desk.slack.views[-1])
    assert shown == {
        "payment": payment,
        "email": "ada@example.com",
        "currency": "USD",  # the policy's: a number alone is in it
        "amount": "25",
        "reason": "damaged",
        "message": "the vase arrived broken",
    }


@pytest.mark.parametrize(
    ("typed", "payment", "amount", "currency"),
    [
        ("8MC585209K746392H 12.50 EUR", "8MC585209K746392H", "12.50", "EUR"),  # PayPal
        ("$40 ch_3Nq2xYz", "ch_3Nq2xYz", "40", "USD"),
        ("pi_3AbC 7", "pi_3AbC", "7", "USD"),
    ],
)
def test_refund_reads_each_kind_of_payment_id_and_amount(
    desk: SlackHarness, typed: str, payment: str, amount: str, currency: str
) -> None:
    desk.slash(OPERATOR, "/refund", typed)
    shown = initial(desk.slack.views[-1])
    assert (shown["payment"], shown["amount"], shown["currency"]) == (payment, amount, currency)


@pytest.mark.parametrize(
    ("said", "reason"),
    [
        ("I changed my mind about the lamp", "changed_mind"),
        ("charged twice for one order", "duplicate_charge"),
        ("got the wrong size", "wrong_item"),
        ("parcel never arrived", "not_received"),
    ],
)
def test_what_happened_chooses_the_reason(desk: SlackHarness, said: str, reason: str) -> None:
    desk.slash(OPERATOR, "/refund", f"py_1a2b3c 12 {said}")
    shown = initial(desk.slack.views[-1])
    assert (shown["reason"], shown["message"]) == (reason, said)


def test_an_email_slack_made_a_link_is_read_as_the_email(desk: SlackHarness) -> None:
    desk.slash(OPERATOR, "/refund", "py_1a2b3c <mailto:ada@example.com|ada@example.com> 10")
    shown = initial(desk.slack.views[-1])
    assert (shown["email"], shown["amount"], shown["message"]) == ("ada@example.com", "10", None)


@pytest.mark.parametrize("asked", ["help", "HELP", "?", "--help"])
def test_refund_help_answers_how_and_opens_no_form(desk: SlackHarness, asked: str) -> None:
    opened = len(desk.slack.views)
    said = desk.slash(OPERATOR, "/refund", asked).text
    assert "Type what you know after it" in said
    assert "For example: `/refund 25.00 py_1a2b3c ada@example.com" in said
    assert "PayPal capture or order id" in said and "/refund find" in said
    assert len(desk.slack.views) == opened, "help opens no form"


def test_refund_alone_still_opens_an_empty_form_in_the_policys_currency(
    desk: SlackHarness,
) -> None:
    desk.slash(OPERATOR, "/refund")
    shown = initial(desk.slack.views[-1])
    assert shown["currency"] == "USD"
    assert [k for k, v in shown.items() if v and k != "currency"] == []


# ---------------------------------------------------------------- the amount as typed


def test_the_amount_field_hands_the_app_what_was_typed(desk: SlackHarness) -> None:
    """A number input may reach the app empty when letters were typed in it (a browser's
    number field does), and empty means "what is left": the field is text the app checks."""
    desk.slash(OPERATOR, "/refund")
    [amount] = [b for b in desk.slack.views[-1]["blocks"] if b.get("block_id") == "amount"]
    assert amount["element"]["type"] == "plain_text_input"
    assert amount["optional"] is True  # empty still means what is left to refund


@pytest.mark.parametrize(
    ("amount", "words"),
    [
        ("abc", "letters are not an amount (“abc”); type digits, such as 12.50."),
        ("12 abc", "letters are not an amount (“12 abc”); type digits, such as 12.50."),
        ("12,50", "“12,50” has a comma; type a point before the decimals, such as 12.50."),
        ("12.50 USD", "“12.50 USD” has a currency in it; type the number alone, such as 12.50."),
        ("-5", "“-5” is below zero; type the amount to give back, such as 12.50."),
        ("$12", "“$12” has a currency in it; type the number alone, such as 12.50."),
        ("1.2.3", "“1.2.3” is not an amount; type digits with one point, such as 12.50."),
        ("0", "“0” refunds nothing; type more than zero, such as 12.50."),
        ("1.234", "“1.234” has more decimals than USD has (2); type, for example, 12.50."),
    ],
)
def test_an_amount_that_is_not_one_is_refused_on_the_field_in_words_quoting_it(
    desk: SlackHarness, amount: str, words: str
) -> None:
    payment = desk.payment("50.00")
    answer = file(desk, typed(payment, amount))
    assert answer["response_action"] == "errors", answer
    assert answer["errors"] == {"amount": words}
    desk.settle()
    assert desk.counts()[0] == 0 and filing_jobs(desk) == 0
    assert desk.refunds_at_processor(payment) == []


def test_an_amount_more_than_money_can_hold_is_refused_on_the_field(desk: SlackHarness) -> None:
    answer = file(desk, typed(desk.payment("50.00"), "10000000000000000"))
    assert answer["response_action"] == "errors"
    assert answer["errors"]["amount"] == (
        "“10000000000000000” is more than any refund can be (at most 9999999999999.99 USD)."
    )
    assert filing_jobs(desk) == 0


def test_other_fields_are_refused_in_words_quoting_what_was_typed(desk: SlackHarness) -> None:
    values = {**typed(desk.payment("50.00"), "10.00"), "currency": "USDX", "payment": "py 1"}
    answer = file(desk, values)
    assert answer["errors"] == {
        "currency": "“USDX” is not a currency; type its three-letter code, such as USD.",
        "payment": "“py 1” is not a payment id; an id is 3 to 100 letters, digits, _ or -, "
        "such as py_1a2b3c.",
    }
    assert "String should" not in json.dumps(answer)
    assert filing_jobs(desk) == 0


def test_an_amount_above_the_whole_payment_is_refused_and_nothing_is_filed(
    desk: SlackHarness,
) -> None:
    payment = desk.payment("50.00")
    answer = file(desk, typed(payment, "999999999999"))
    assert answer["response_action"] == "update"  # checked with the processor's payment
    desk.settle()
    shown = json.dumps(desk.slack.workspace.modals[OPERATOR].view, ensure_ascii=False)
    assert (
        "not filed" in shown
        and "Amount: 999999999999.00 USD is more than the 50.00 USD paid" in shown
    )
    assert "999999999999" in shown, "what was typed is kept in the modal"
    assert desk.counts()[0] == 0
    assert not [t for t in told(desk) if "Filed case" in t]
    assert desk.refunds_at_processor(payment) == []


def test_an_empty_amount_still_files_what_is_left_on_the_payment(desk: SlackHarness) -> None:
    payment = desk.payment("50.00")
    assert file(desk, typed(payment, None))["response_action"] == "update"
    desk.settle()
    [said] = [t for t in told(desk) if "Filed case" in t]
    case = desk.get(said.split("`")[1])
    assert (case["amount"], case["amount_source"]) == ("50.00", "system_of_record")
    assert f"Filed case `{case['id']}` for 50.00 USD: " in said  # where it stands, in words


# ---------------------------------------------------------------- the job's own case


def queued_filing(desk: SlackHarness, payment: str) -> ClaimedJob:
    """A `/refund` submission's job, queued as the modal queues it, not yet run."""
    request = {k: v for k, v in typed(payment, "20.00").items() if v is not None}
    payload = {
        "request": {**request, "source": "slack"},
        "user": OPERATOR,
        "channel": "C0REFUNDS",
        "view_id": None,
    }
    with desk.runtime.db.write() as session:
        job_id = queue(session, kind=FILE_CASE, payload=payload)
    return ClaimedJob(job_id, FILE_CASE, payload, attempt=1, failures=0, max_attempts=5)


def test_a_case_planted_with_the_jobs_external_id_is_never_reported_as_the_operators(
    desk: SlackHarness,
) -> None:
    payment = desk.payment("50.00")
    job = queued_filing(desk, payment)
    # Planted as the API let anyone do before it refused these fields: the job's external id,
    # and the source of a person's filing.
    planted = submit(
        desk.runtime.desk,
        parse_request(
            {
                **desk.request(payment, "15.00"),
                "source": "slack",
                "external_id": f"slack-job-{job.id}",
            }
        ),
        actor=Actor("api", "intruder"),
    ).case_id
    assert desk.runtime.desk.jobs.run_now(job.id)
    desk.settle()
    [said] = [t for t in told(desk) if "Filed case" in t]
    filed = said.split("`")[1]
    assert filed != planted
    with desk.runtime.db.read() as session:
        case = session.get(Case, filed)
        assert case is not None
        assert (case.requested_by, case.requested_amount) == (OPERATOR, 2000)
    assert desk.counts()[0] == 2


def test_a_retried_filing_job_files_its_case_once(desk: SlackHarness) -> None:
    """A job that ran and then ran again (it died before it was marked done) finds its case."""
    job = queued_filing(desk, desk.payment("50.00"))
    file_case(desk.runtime.desk, job)
    file_case(desk.runtime.desk, job)
    desk.settle()
    said = [t for t in told(desk) if "Filed case" in t]  # the sweep ran the queued job too
    assert len(said) >= 2 and len({t.split("`")[1] for t in said}) == 1, said
    assert desk.counts()[0] == 1


def test_a_payment_the_processor_does_not_have_is_said_by_the_fields_label(
    desk: SlackHarness,
) -> None:
    assert file(desk, typed("py_nowhere", "10.00"))["response_action"] == "update"
    desk.settle()
    shown = json.dumps(desk.slack.workspace.modals[OPERATOR].view, ensure_ascii=False)
    assert "Payment id: the processor has no payment “py_nowhere”" in shown, shown
    assert desk.counts()[0] == 0
