"""Cases on the web: search, filters, order, pages and the CSV of `cases export`."""

from __future__ import annotations

import csv
import io
import re

from refund_desk.cases.listing import EXPORT_FIELDS
from tests.helpers import Harness
from tests.web.desk.conftest import FINANCE, LEAD, browser
from tests.web.desk.test_queue import click, waiting_case


def listed(page: str) -> list[str]:
    return re.findall(r'<th scope="row"><a href="/desk/cases/([^"]+)">', page)


def made(desk: Harness) -> dict[str, str]:
    """An automatic refund, two finance cases (one denied on the web) and another customer's."""
    small = desk.post(desk.request(desk.payment("20.00"), "20.00")).json()
    assert small["status"] == "refunded", small
    big, other = waiting_case(desk), waiting_case(desk, "700.00")
    click(browser(desk, FINANCE), other, "Deny", reason="No.")
    bob = desk.payment("40.00", email="bob@example.com")
    bobs = desk.post({**desk.request(bob, "30.00"), "email": "bob@example.com"}).json()
    return {"small": small["id"], "big": big, "denied": other, "bob": bobs["id"], "bob_pay": bob}


def test_search_finds_by_exact_email_and_by_any_id(desk: Harness) -> None:
    ids = made(desk)
    lead = browser(desk, LEAD)
    assert listed(lead.get("/desk/cases?q=bob@example.com").text) == [ids["bob"]]
    assert listed(lead.get("/desk/cases?q=BOB@Example.com").text) == [ids["bob"]]
    assert listed(lead.get("/desk/cases?q=bob@example").text) == []
    assert listed(lead.get(f"/desk/cases?q={ids['bob_pay']}").text) == [ids["bob"]]
    assert listed(lead.get(f"/desk/cases?q={ids['big']}").text) == [ids["big"]]


def test_filters_combine_and_sort(desk: Harness) -> None:
    ids = made(desk)
    lead = browser(desk, LEAD)
    assert listed(lead.get("/desk/cases?status=denied").text) == [ids["denied"]]
    assert set(listed(lead.get("/desk/cases?rule=damaged-small").text)) == {
        ids["small"],
        ids["bob"],
    }
    assert set(listed(lead.get("/desk/cases?rule=large&tier=3").text)) == {
        ids["big"],
        ids["denied"],
    }
    assert listed(lead.get(f"/desk/cases?decider={FINANCE}").text) == [ids["denied"]]
    assert listed(lead.get("/desk/cases?min=650&max=800").text) == [ids["denied"]]
    assert listed(lead.get("/desk/cases?processor=sandbox&sort=largest").text)[:2] == [
        ids["denied"],
        ids["big"],
    ]
    assert listed(lead.get("/desk/cases?source=web_form").text) == []


def test_pages_follow_a_cursor_without_repeating(desk: Harness) -> None:
    ids = made(desk)
    lead = browser(desk, LEAD)
    from refund_desk.web.desk import cases

    cases.PAGE, old = 2, cases.PAGE
    try:
        seen: list[str] = []
        url = "/desk/cases?sort=oldest"
        while url:
            page = lead.get(url).text
            seen += listed(page)
            found = re.search(r'<a href="(/desk/cases\?[^"]*cursor=[^"]+)">Next page', page)
            url = found.group(1).replace("&amp;", "&") if found else ""
        assert sorted(seen) == sorted(ids[k] for k in ("small", "big", "denied", "bob"))
        assert len(seen) == len(set(seen)) == 4
    finally:
        cases.PAGE = old


def test_bad_filters_are_named_and_nothing_is_searched(desk: Harness) -> None:
    made(desk)
    page = browser(desk, LEAD).get("/desk/cases?tier=9&since=yesterday&min=12.345&status=x")
    assert page.status_code == 200
    assert "A tier is 1, 2, 3 or 4." in page.text
    assert "&#39;yesterday&#39; is not a date" in page.text
    assert "&#39;12.345&#39; is not an amount in USD." in page.text
    assert listed(page.text) == []


def test_the_export_is_what_is_filtered_with_the_cli_columns(desk: Harness) -> None:
    ids = made(desk)
    answer = browser(desk, LEAD).get("/desk/cases.csv?rule=large")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert tuple(rows[0].keys()) == EXPORT_FIELDS
    assert {r["case_id"] for r in rows} == {ids["big"], ids["denied"]}
    assert {r["approvers"] for r in rows} == {""}
