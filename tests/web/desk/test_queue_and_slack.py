"""One record, two surfaces: a decision on the web updates the Slack card, and a click in Slack
shows on an open desk page."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from refund_desk.demo.slack import SlackEmulator
from tests.bot.conftest import slack, slack_desk  # noqa: F401 (fixtures)
from tests.bot.helpers import review_case
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness
from tests.web.desk.conftest import FINANCE, browser
from tests.web.desk.test_queue import click


@pytest.fixture()
def both(sqlite_url: str, slack_desk: Callable[..., SlackHarness]) -> SlackHarness:  # noqa: F811
    return slack_desk(sqlite_url, ACME.read_text())


def test_a_decision_on_the_web_updates_the_slack_card(both: SlackHarness) -> None:
    case_id = review_case(both)
    click(browser(both, FINANCE), case_id, "Deny", reason="Outside the return window.")
    both.settle()
    card = both.card()
    assert card.updates >= 1
    shown = json.dumps(card.blocks)
    assert "Denied" in shown and "Outside the return window." in shown
    assert '"action_id": "approve"' not in shown, "a decided card has no buttons"


def test_a_click_in_slack_shows_on_an_open_page(
    both: SlackHarness,
    slack: SlackEmulator,  # noqa: F811
) -> None:
    case_id = review_case(both)
    page = browser(both, FINANCE)
    mark = page.get("/desk/changes").json()["mark"]
    assert case_id in page.get("/desk").text
    both.approve(FINANCE, both.buttons()["approve"])
    both.settle()
    assert page.get(f"/desk/changes?since={mark}").json()["changed"] is True
    assert case_id not in page.get("/desk").text
