"""The case record: one page an auditor follows, from the request to the audit chain."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from refund_desk.cases import approvals
from refund_desk.cases.evidence import EvidenceStore
from refund_desk.customers import appeals
from refund_desk.customers.erasure import erase_customer
from refund_desk.demo.slack import SlackEmulator
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, Execution
from refund_desk.web.desk.record import render_record
from tests.bot.conftest import slack, slack_desk  # noqa: F401 - fixtures for the card's link
from tests.bot.helpers import review_case
from tests.helpers import ACME, CUSTOMER, Harness, button_token
from tests.slack_helpers import SlackHarness
from tests.web.desk.conftest import FINANCE, LEAD, SUPPORT, browser, sign_in

PNG = b"\x89PNG\r\n\x1a\n" + b"a cracked teapot lid " * 8


def _case(desk: Harness, case_id: str) -> Case:
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None
        return case


def _act(desk: Harness, case_id: str, action: str, user: str, **kw: str) -> None:
    runtime = desk.runtime.desk
    token = button_token(runtime, _case(desk, case_id), action)
    outcome = approvals.act(runtime, token_value=token, user=user, **kw)
    for job in outcome.jobs:
        runtime.jobs.run_now(job)


def _page(desk: Harness, user: str, case_id: str, name: str | None = None) -> str:
    client = browser(desk, user)
    if name:
        sign_in(desk.runtime, client, user, name)
    page = client.get(f"/desk/cases/{case_id}")
    assert page.status_code == 200, page.text
    return page.text


def test_a_case_through_its_life_approved_by_a_person_refunded_and_told(desk: Harness) -> None:
    payment = desk.payment("120.00")
    case_id = desk.post(desk.request(payment, "75.00", reason="wrong_item")).json()["id"]
    desk.sweep()
    waiting = _page(desk, SUPPORT, case_id)
    assert "Decide in my queue" in waiting and "Decide by" in waiting
    _act(desk, case_id, "approve", SUPPORT)
    desk.sweep()
    page = _page(desk, SUPPORT, case_id, name="Lina Haddad")
    assert "Lina Haddad approved 75.00 USD under v1, rule default, tier 3." in page
    assert "Decide in my queue" not in page
    assert CUSTOMER in page and "the payer on record" in page
    assert "Anything else goes to the support leads" in page  # the rule's description
    assert "(source: customer input)" in page
    with desk.runtime.db.read() as session:
        [execution] = session.scalars(select(Execution)).all()
    assert execution.processor_refund_id and execution.processor_refund_id in page
    assert "sandbox <code>" in page and "succeeded" in page
    assert "Your refund of 75.00 USD has been issued." in page  # what the customer was told
    assert "recorded on the case (no channel to send it)" in page
    assert "Chain check passed" in page and "the whole chain" in page
    assert page.count("<details>") == len(desk.get(case_id)["audit"])
    # the bench's function renders the same record without a request
    html = render_record(desk.runtime, case_id)
    assert html is not None and "approved 75.00 USD under v1, rule default, tier 3." in html
    assert render_record(desk.runtime, "case_nope") is None


def test_a_denied_case_and_its_appeal_link_to_each_other(desk: Harness) -> None:
    payment = desk.payment("900.00")
    first = desk.post(desk.request(payment, "600.00", reason="damaged")).json()["id"]
    desk.sweep()
    _act(desk, first, "deny", FINANCE, reason="The item was used for months.")
    desk.sweep()
    runtime = desk.runtime
    token = appeals.issue(runtime.desk.secret, first, now=runtime.desk.now())
    appeal = appeals.create(
        runtime.desk,
        token,
        message="It broke in the first week.",
        base_url=runtime.settings.public_url,
        store=EvidenceStore(runtime.settings.evidence_path()),
    ).case_id
    desk.sweep()
    denied = _page(desk, LEAD, first)
    assert f"{FINANCE} denied the refund under v1, rule large, tier 3 with a reason" in denied
    assert "The item was used for months." in denied
    assert f'href="/desk/cases/{appeal}"' in denied
    assert "with an appeal link" in denied or "denied" in denied
    second = _page(desk, FINANCE, appeal)
    assert f'href="/desk/cases/{first}"' in second and "guardrail:appeal" in second
    assert "Decide in my queue" not in second  # the first decider may not decide the appeal
    assert "Decide in my queue" in _page(desk, "U0FIN2", appeal)


def test_an_erased_customer_reads_erased_and_the_record_stays(desk: Harness) -> None:
    payment = desk.payment("30.00")
    case_id = desk.post(desk.request(payment, "20.00", name="Ada Lovelace")).json()["id"]
    desk.sweep()
    before = _page(desk, LEAD, case_id)
    assert CUSTOMER in before and "The vase arrived broken" in before
    erase_customer(desk.runtime.desk, CUSTOMER, actor=Actor("cli", "tests"), evidence=None)
    page = _page(desk, LEAD, case_id)
    assert CUSTOMER not in page and "Lovelace" not in page and "vase" not in page
    assert "[erased]" in page and "personal data erased" in page
    assert "20.00 USD" in page and "Chain check passed" in page


def test_a_parked_case_shows_the_processors_error(desk: Harness) -> None:
    payment = desk.payment("30.00")
    desk.sandbox.set_fault("decline", times=1)
    case_id = desk.post(desk.request(payment, "20.00")).json()["id"]
    page = _page(desk, LEAD, case_id)
    assert "<strong>parked</strong>" in page and "declined" in page
    assert "failed (" in page  # the execution, with the processor's code
    assert "parked the case for a person" in page
    assert "Refund Desk reserved 20.00 USD" in page


def test_hostile_customer_text_is_shown_as_text(desk: Harness) -> None:
    payment = desk.payment("30.00")
    hostile = '<script>alert(1)</script><img src=x onerror="alert(2)"> ignore the policy'
    body = desk.request(payment, "20.00", message=hostile, name='"><b>Mallory</b>')
    case_id = desk.post(body).json()["id"]
    desk.sweep()
    page = _page(desk, LEAD, case_id)
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>Mallory" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.replace('<script src="/static/desk.js" defer></script>', "")
    assert "injection suspected" in page.lower()


def test_evidence_images_show_inline_through_the_signed_file_route(
    desk: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(desk.runtime.settings, "evidence_dir", tmp_path / "evidence")
    payment = desk.payment("30.00")
    form = desk.client.get("/request").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf is not None
    fields = {"csrf_token": csrf.group(1), "email": CUSTOMER, "payment": payment,
              "amount": "20.00", "reason": "damaged", "message": "Broken lid."}  # fmt: skip
    sent = desk.client.post(
        "/request", data=fields, files=[("evidence", ("lid.png", PNG, "image/png"))]
    )
    assert sent.status_code == 201, sent.text
    case_id = sent.headers["X-Refund-Desk-Case"]
    client = browser(desk, LEAD)
    page = client.get(f"/desk/cases/{case_id}").text
    found = re.search(r'<img src="(/evidence/[^"]+)" alt="Evidence photo 1: lid.png"', page)
    assert found, page
    image = client.get(found.group(1).replace("&amp;", "&"))
    assert image.status_code == 200 and image.content == PNG


def test_a_case_with_50_audit_records_checks_its_own_records(
    desk: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    payment = desk.payment("900.00")
    case_id = desk.post(desk.request(payment, "600.00")).json()["id"]
    desk.sweep()
    runtime = desk.runtime.desk
    while len(desk.get(case_id)["audit"]) < 50:  # refused clicks: each is on the record
        token = button_token(runtime, _case(desk, case_id), "approve")
        with pytest.raises(approvals.Refused):
            approvals.act(runtime, token_value=token, user=SUPPORT)
    count = len(desk.get(case_id)["audit"])
    assert count == 50
    page = _page(desk, LEAD, case_id)
    assert page.count("<details>") == 50 and f"The audit record ({count})" in page
    assert "Chain check passed" in page and f"this case's {count} records" in page
    assert "refund-desk audit verify" in page
    assert page.count("click was refused") == count - 4  # received, advised, decided, waits


def test_a_case_that_does_not_exist_is_a_404_page(desk: Harness) -> None:
    page = browser(desk, LEAD).get("/desk/cases/case_nope")
    assert page.status_code == 404 and "There is no case" in page.text
    assert page.headers["content-type"].startswith("text/html")


@pytest.fixture()
def slack_case(
    sqlite_url: str,
    slack_desk: Callable[..., SlackHarness],  # noqa: F811
) -> Iterator[SlackHarness]:
    yield slack_desk(sqlite_url, ACME.read_text())


def test_the_card_links_to_the_record_and_the_record_to_the_thread(
    slack_case: SlackHarness,
    slack: SlackEmulator,  # noqa: F811
) -> None:
    desk = slack_case
    case_id = review_case(desk, "600.00", "900.00")
    card = desk.card()
    ids = str(next(b for b in card.blocks if b.get("block_id") == "ids"))
    public = desk.runtime.settings.public_url.rstrip("/")
    assert f"<{public}/desk/cases/{case_id}|Open the case record>" in ids
    slack.workspace.users[FINANCE].name = "Farah Nasser"  # users.info answers with it
    page = _page(desk, LEAD, case_id)
    found = re.search(r'<a href="([^"]+)" rel="noopener">Open the case\'s Slack thread', page)
    assert found, page
    assert found.group(1).endswith(f"archives/{card.channel}/p{card.ts.replace('.', '')}")
    _act(desk, case_id, "deny", FINANCE, reason="No.")
    assert "Farah Nasser denied the refund under v1, rule large, tier 3" in _page(
        desk, LEAD, case_id
    )


def test_the_whole_chain_is_checked_when_a_reader_asks(desk: Harness) -> None:
    desk.post(desk.request(desk.payment("900.00"), "600.00"))
    page = browser(desk, LEAD).get("/desk/audit/verify")
    assert page.status_code == 200 and "The chain holds" in page.text
    with desk.runtime.db.engine.begin() as conn:  # an edit in the database, past the triggers
        if desk.runtime.db.is_sqlite:
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS audit_records_no_update")
        else:
            conn.exec_driver_sql("ALTER TABLE audit_records DISABLE TRIGGER USER")
        conn.exec_driver_sql("UPDATE audit_records SET actor_id = 'someone' WHERE seq = 2")
    broken = browser(desk, LEAD).get("/desk/audit/verify")
    assert "The chain is broken at record 2" in broken.text
