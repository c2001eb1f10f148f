"""The policy pages: versions with what gated them, the rules in words, a diff between two
published versions, a draft's tests (a failing one shown), its backtest and proof, refusals."""

from __future__ import annotations

from html import escape

import pytest

from refund_desk.governance import drafts
from refund_desk.governance.backtest import record_backtest, run_backtest
from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.policy.diff import diff_text
from refund_desk.storage.audit import Actor
from tests.helpers import ACME, Harness
from tests.web.desk.conftest import FINANCE, LEAD, NOBODY, browser

LEAD_ACTOR = Actor("human", LEAD)
WIDER = ACME.read_text().replace(
    "request.amount <= 50 and order.age_days <= 30", "request.amount <= 80 and order.age_days <= 30"
)
NO_DAMAGED = ACME.read_text().replace(
    """    outcome: approve
    tier: 2
""",
    """    outcome: deny
""",
)
FAILING = (
    ACME.read_text()
    + """  - name: a wrong expectation
    given: {request: {amount: 20, reason: damaged}, order: {age_days: 3, refundable: 20}}
    expect: {outcome: deny}
"""
)


def _draft(desk: Harness, source: str) -> int:
    with desk.runtime.db.write() as session:
        draft, _ = drafts.save_draft(
            session, desk.runtime.desk.audit, source=source, actor=LEAD_ACTOR
        )
        assert draft.id is not None
        return draft.id


def test_the_overview_shows_the_versions_and_the_active_rules_in_words(desk: Harness) -> None:
    desk.publish(WIDER)
    page = browser(desk, FINANCE).get("/desk/policy")
    assert page.status_code == 200, page.text
    html = page.text
    assert '<a href="/desk/policy/versions/2">v2</a> (active)' in html
    assert '<a href="/desk/policy/versions/1">v1</a>' in html
    assert "tests (command line)" in html  # who published, as Slack says it
    assert "against v1: nowhere more permissive" not in html  # the harness publishes without proof
    assert "Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves" in html
    assert "paid automatically (tier 2)" in html
    assert "decided by finance (up to 5000.00 USD), tier 4" in html
    assert escape("request.amount <= 80 and order.age_days <= 30", quote=False) in html
    assert '<a href="/desk/policy/diff?a=v1&amp;b=v2">v1 → v2</a>' in html


def test_the_diff_between_two_published_versions_is_the_one_slack_shows(desk: Harness) -> None:
    desk.publish(WIDER)
    page = browser(desk, FINANCE).get("/desk/policy/diff?a=v1&b=v2")
    assert page.status_code == 200, page.text
    said = diff_text(parse_policy(ACME.read_text()), parse_policy(WIDER), old="v1", new="v2")
    lines = said.as_text().splitlines()
    assert len(lines) >= 2
    for line in lines:
        assert escape(line, quote=False) in page.text
    assert "(damaged-small): when request.amount &lt;= 50 → 80" in page.text
    # the default compares the two newest versions
    assert escape(lines[0], quote=False) in browser(desk, FINANCE).get("/desk/policy/diff").text


def test_a_version_shows_the_gate_that_let_it_go_live(desk: Harness) -> None:
    desk.publish(WIDER)
    page = browser(desk, LEAD).get("/desk/policy/versions/2")
    assert page.status_code == 200, page.text
    assert "Embedded tests</dt><dd>1 passed" in page.text
    assert "over 30 days, run by cli:tests" in page.text
    assert "What changed from v1" in page.text


def test_a_draft_with_a_failing_test_says_so(desk: Harness) -> None:
    draft = _draft(desk, FAILING)
    page = browser(desk, FINANCE).get(f"/desk/policy/drafts/{draft}")
    assert page.status_code == 200, page.text
    assert "1 passed, 1 failed: it cannot be published until every test passes." in page.text
    assert '<th scope="row">a wrong expectation</th><td><strong>Failed</strong></td>' in page.text
    assert "expected deny, got approve by damaged-small at tier 2" in page.text
    assert "No backtest on this text yet" in page.text


def test_an_invalid_draft_shows_its_problems(desk: Harness) -> None:
    draft = _draft(desk, "policy: broken\n")
    page = browser(desk, FINANCE).get(f"/desk/policy/drafts/{draft}")
    assert page.status_code == 200
    assert "Not valid" in page.text


def test_a_draft_shows_its_backtest_flips_with_the_money_and_the_provers_regions(
    desk: Harness,
) -> None:
    answer = desk.post(desk.request(desk.payment("30.00"), amount="20.00"))
    assert answer.status_code in (200, 201, 202), answer.text
    desk.sweep()
    assert desk.get(answer.json()["id"])["status"] == "refunded"
    draft = _draft(desk, NO_DAMAGED)
    doc = parse_policy(NO_DAMAGED)
    run = run_backtest(desk.runtime.db, CompiledPolicy.compile(doc), label=f"d{draft}")
    with desk.runtime.db.write() as session:
        record_backtest(session, desk.runtime.desk.audit, run, actor=LEAD_ACTOR, draft_id=draft)
    page = browser(desk, FINANCE).get(f"/desk/policy/drafts/{draft}")
    assert page.status_code == 200, page.text
    assert f"Backtest of d{draft} over the last 30 days: 1 case, 0 unchanged" in page.text
    row = '<th scope="row">paid automatically → denied</th><td class="num">1</td>'
    assert row + '<td class="num">20.00 USD</td>' in page.text

    proof = browser(desk, FINANCE).get(f"/desk/policy/proof?old=v1&new=d{draft}")
    assert proof.status_code == 200, proof.text
    assert "Nowhere more permissive" in proof.text
    assert '<th scope="row">Denied</th><td>No</td>' in proof.text
    assert "reason damaged" in proof.text  # the region in words, with an example


def test_the_shadow_page_without_a_run(desk: Harness) -> None:
    page = browser(desk, FINANCE).get("/desk/policy/shadow")
    assert page.status_code == 200
    assert "No shadow run is going on" in page.text


def test_unknown_versions_and_drafts_are_not_found(desk: Harness) -> None:
    assert browser(desk, FINANCE).get("/desk/policy/versions/9").status_code == 404
    assert browser(desk, FINANCE).get("/desk/policy/drafts/9").status_code == 404
    assert browser(desk, FINANCE).get("/desk/policy/diff?a=v1&b=v9").status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/desk/policy",
        "/desk/policy/versions/1",
        "/desk/policy/diff?a=v1&b=v1",
        "/desk/policy/drafts/1",
        "/desk/policy/proof?old=v1&new=v1",
        "/desk/policy/shadow",
    ],
)
def test_a_person_with_no_role_is_refused(desk: Harness, path: str) -> None:
    page = browser(desk, NOBODY).get(path)
    assert page.status_code == 403
    assert "names you in none of" in page.text
    assert "acme" not in page.text.lower()
