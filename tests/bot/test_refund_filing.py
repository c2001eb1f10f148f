"""`/refund` files exactly what the operator typed, and only their own filing:

- an amount that is not an amount is refused on the modal's field, quoting what was typed,
  never read as "empty" (which means what is left on the payment);
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


# ---------------------------------------------------------------- the amount as typed


def test_the_amount_field_hands_the_app_what_was_typed(desk: SlackHarness) -> None:
    """A number input may reach the app empty when letters were typed in it (a browser's
    number field does), and empty means "what is left": the field is text the app checks."""
    desk.slash(OPERATOR, "/refund")
    [amount] = [b for b in desk.slack.views[-1]["blocks"] if b.get("block_id") == "amount"]
    assert amount["element"]["type"] == "plain_text_input"
    assert amount["optional"] is True  # empty still means what is left to refund


@pytest.mark.parametrize("amount", ["abc", "12,50", "12.50 USD", "-5", "$12"])
def test_letters_in_the_amount_are_refused_on_the_field_quoting_what_was_typed(
    desk: SlackHarness, amount: str
) -> None:
    payment = desk.payment("50.00")
    answer = file(desk, typed(payment, amount))
    assert answer["response_action"] == "errors", answer
    said = answer["errors"]["amount"]
    assert f"“{amount}” is not an amount" in said and "12.50" in said
    desk.settle()
    assert desk.counts()[0] == 0 and filing_jobs(desk) == 0
    assert desk.refunds_at_processor(payment) == []


def test_an_amount_more_than_money_can_hold_is_refused_on_the_field(desk: SlackHarness) -> None:
    answer = file(desk, typed(desk.payment("50.00"), "10000000000000000"))
    assert answer["response_action"] == "errors"
    assert "too large" in answer["errors"]["amount"]
    assert filing_jobs(desk) == 0


def test_an_amount_above_the_whole_payment_is_refused_and_nothing_is_filed(
    desk: SlackHarness,
) -> None:
    payment = desk.payment("50.00")
    answer = file(desk, typed(payment, "999999999999"))
    assert answer["response_action"] == "update"  # checked with the processor's payment
    desk.settle()
    shown = json.dumps(desk.slack.workspace.modals[OPERATOR].view)
    assert "not filed" in shown and "more than the 50.00 USD paid" in shown
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
