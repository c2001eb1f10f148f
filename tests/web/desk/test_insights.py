"""Insights: known data in, the figures and the SVG out; an empty period says so."""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta
from typing import Any
from xml.etree import ElementTree

from refund_desk import clock
from refund_desk.storage.models import Approval, Case, Execution, Payment, ProcessorFinding
from refund_desk.web.desk.insights import (
    Window,
    automatic_share,
    findings_by_kind,
    outcomes_by_day,
    refunded_by_day,
    rules_fired,
    sla_by_day,
    waiting_past_deadline,
    waits_by_tier,
)
from tests.helpers import Harness
from tests.web.desk.conftest import FINANCE, NOBODY, browser

_ids = itertools.count(1)


def _case(
    session: Any,
    at: datetime,
    *,
    status: str = "refunded",
    rule: str = "default",
    tier: int = 3,
    amount: int = 10000,
    reason: str = "damaged",
    **extra: Any,
) -> str:
    n = next(_ids)
    payment = f"pay_insight_{n}"
    session.add(
        Payment(id=payment, processor="sandbox", currency="USD", amount=amount, created_at=at)
    )
    session.flush()
    case_id = f"case_insight_{n}"
    session.add(
        Case(
            id=case_id,
            status=status,
            source="api",
            correlation_id=f"corr{n}",
            payment_id=payment,
            currency="USD",
            amount=amount,
            amount_source="request",
            reason=reason,
            email_enc="x",
            email_hash=f"h{n}",
            decision={"outcome": "review" if tier >= 3 else "approve", "rule": rule, "tier": tier},
            created_at=at,
            updated_at=at,
            **extra,
        )
    )
    session.flush()
    return case_id


def _approval(session: Any, case_id: str, at: datetime, who: str = "U0LEAD1") -> None:
    session.add(
        Approval(
            case_id=case_id,
            approver=who,
            decision="approve",
            amount=None,
            token_nonce=f"nonce{next(_ids)}",
            created_at=at,
        )
    )


def _paid(session: Any, case_id: str, amount: int, at: datetime, automatic: bool) -> None:
    n = next(_ids)
    session.add(
        Execution(
            id=f"ex{n}",
            case_id=case_id,
            payment_id=session.get(Case, case_id).payment_id,
            amount=amount,
            currency="USD",
            idempotency_key=f"idem{n}",
            status="succeeded",
            automatic=automatic,
            basis="test",
            created_at=at,
            finished_at=at,
        )
    )


def _known(desk: Harness) -> datetime:
    """Two days ago: five tier-3 cases decided after 1, 2, 3, 4 and 10 minutes (one approved
    twice), a tier-4 case after an hour, two automatic refunds; ten days ago two cases of
    another reason; today a case past its deadline, escalated; three findings yesterday."""
    now = clock.now()
    day = now - timedelta(days=2)
    with desk.runtime.db.write() as session:
        for minutes in (1, 2, 3, 4, 10):
            cid = _case(session, day)
            _approval(session, cid, day + timedelta(minutes=minutes))
            _paid(session, cid, 10000, day + timedelta(minutes=minutes, seconds=5), False)
            if minutes == 1:
                _approval(session, cid, day + timedelta(hours=5), who="U0LEAD2")
        cid = _case(session, day, status="denied", rule="risk-signal", tier=4)
        _approval(session, cid, day + timedelta(hours=1))
        for _ in range(2):
            cid = _case(session, day, rule="damaged-small", tier=2, amount=2000)
            _paid(session, cid, 2000, day + timedelta(seconds=3), True)
        for _ in range(2):
            _case(session, now - timedelta(days=10), status="denied", reason="not_received")
        _case(
            session,
            now - timedelta(minutes=30),
            status="awaiting_approval",
            sla_due_at=now - timedelta(minutes=1),
            escalation_level=1,
        )
        for n, kind in enumerate(("unknown_refund", "unknown_refund", "missing_at_processor")):
            session.add(
                ProcessorFinding(
                    key=f"{kind}:{n}",
                    kind=kind,
                    detail=f"Refund re_{n} of 5.00 USD is not ours.",
                    found_at=now - timedelta(days=1),
                )
            )
    return now


def test_known_data_gives_the_figures(desk: Harness) -> None:
    now = _known(desk)
    window = Window.last(30, now)
    day = (now - timedelta(days=2)).strftime("%Y-%m-%d")
    today = now.strftime("%Y-%m-%d")
    with desk.runtime.db.read() as session:
        waits = {w.tier: w for w in waits_by_tier(session, window)}
        assert (waits[3].cases, waits[3].median, waits[3].p90) == (5, 180, 600)
        assert (waits[4].cases, waits[4].median, waits[4].p90) == (1, 3600, 3600)
        assert set(waits) == {3, 4}
        outcomes = outcomes_by_day(session, window)
        assert outcomes[day] == {"Refunded": 7, "Denied or answered": 1}
        assert outcomes[today] == {"With a person": 1}
        assert refunded_by_day(session, window)["USD"] == {day: 5 * 10000 + 2 * 2000}
        assert rules_fired(session, window) == [
            ("default", 8),
            ("damaged-small", 2),
            ("risk-signal", 1),
        ]
        shares = automatic_share(session, window)
        assert shares[True] == (2, {"USD": 4000}) and shares[False] == (5, {"USD": 50000})
        assert sla_by_day(session, window, now)[today] == (1, 1)
        assert waiting_past_deadline(session, now) == 1
        assert findings_by_kind(session, window) == [
            ("unknown_refund", 2),
            ("missing_at_processor", 1),
        ]
        # a week's window leaves out the cases of ten days ago
        week = Window.last(7, now)
        assert sum(sum(v.values()) for v in outcomes_by_day(session, week).values()) == 9


def test_the_page_draws_each_figure_as_svg_with_its_table(desk: Harness) -> None:
    _known(desk)
    page = browser(desk, FINANCE).get("/desk/insights?days=30")
    assert page.status_code == 200, page.text
    html = page.text
    assert html.count('role="img"') == 8
    assert html.count("<details>") == 8
    for key in ("outcomes", "money-usd", "rules", "waits", "sla", "automatic", "drift", "findings"):
        assert f'aria-labelledby="{key}-t {key}-d"' in html
    # the wait by tier: median and p90 in words, in the picture and in the table
    assert '<td class="num">3 min</td><td class="num">10 min</td>' in html
    assert "Tier 4 (1 cases)" in html and "60 min" in html
    assert "Of 7 refunds paid in the last 30 days, 29% were paid automatically." in html
    assert "540.00 USD refunded in the last 30 days." in html
    assert "“Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves”" in html
    assert "moved 100%" in html  # drift: damaged now, not received before
    assert "A refund at the processor we did not make" in html
    assert "Refund re_0 of 5.00 USD is not ours." in html
    assert "No data in this period" not in html
    assert not re.search(r"<style|style=", html)
    drawn = re.findall(r"<svg .*?</svg>", html, re.S)
    assert len(drawn) == 8
    for svg in drawn:  # well-formed, named by its title and description
        root = ElementTree.fromstring(svg)
        assert root.get("role") == "img"
        assert root.find("{http://www.w3.org/2000/svg}title") is not None


def test_a_period_with_no_data_says_so(desk: Harness) -> None:
    page = browser(desk, FINANCE).get("/desk/insights?days=7")
    assert page.status_code == 200, page.text
    assert page.text.count("No data in this period") >= 7
    assert "No findings in this period" in page.text


def test_a_person_with_no_role_sees_no_figures(desk: Harness) -> None:
    page = browser(desk, NOBODY).get("/desk/insights")
    assert page.status_code == 403
    assert 'role="img"' not in page.text
