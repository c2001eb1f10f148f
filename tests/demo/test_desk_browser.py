"""The web desk in a real browser: headless Chromium (the system's) signs in as the demo's people
through the Slack emulator's OpenID Connect consent page, works the queue, searches, exports,
reads a record, the policy and the insights, and runs axe-core on every page.

The demo runs in its own process, as a new user starts it. Where Chromium or axe-core is missing
the test skips with the reason; in CI a skip is a failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refund_desk.demo.runner import NAMES
from tests.demo.axe import assert_accessible, axe_source
from tests.demo.demo_process import Demo
from tests.demo.test_demo_browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, shots

pytestmark = pytest.mark.slow

LEE, LINA, FARAH, FELIX, MAYA, ADA = "U0LEAD1", "U0LEAD2", "U0FIN1", "U0FIN2", "U0MGR1", "U0AUD1"
PHONE = {"width": 375, "height": 740}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("desk") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    axe_source()  # skips with the reason where axe-core is missing
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Person:
    """One browser (its own cookies) signed in as one demo person; every page it opens is
    checked with axe-core, and no page may break its Content-Security-Policy."""

    def __init__(self, chromium: Any, demo: Demo, user: str) -> None:
        self.base = demo.base
        self.context = chromium.new_context(viewport={"width": 1280, "height": 800})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.blocked: list[str] = []
        self.page.on(
            "console",
            lambda m: self.blocked.append(m.text) if "Content Security Policy" in m.text else None,
        )
        self.sign_in(user)

    def sign_in(self, user: str) -> None:
        page = self.page
        page.goto(f"{self.base}/desk")
        page.get_by_role("link", name="Sign in with Slack").click()
        page.get_by_label(re.compile(f"^{NAMES[user]}")).check()
        assert_accessible(page, "the emulator's consent page")
        page.get_by_role("button", name="Allow").click()
        page.wait_for_url(f"{self.base}/desk")
        assert NAMES[user] in page.locator("header").inner_text()

    def open(self, path: str) -> Any:
        self.page.goto(f"{self.base}{path}")
        self.check(path)
        return self.page

    def check(self, where: str) -> None:
        assert_accessible(self.page, where)
        assert not self.blocked, f"the page broke its CSP: {self.blocked}"

    def case(self, amount: str) -> Any:
        """The queue's section for the case of this amount."""
        return self.page.locator("section.case", has_text=f"{amount} USD ·")

    def decide(self, case: str, button: str, **typed: str) -> str:
        """Press a queue button on the case of amount ``case``, read the confirmation
        (returned), fill it in and confirm."""
        self.open("/desk")
        self.case(case).get_by_role("button", name=re.compile(f"^{re.escape(button)}:")).click()
        page = self.page
        page.locator("h1").wait_for()
        self.check(f"the confirmation of {button}")
        said = str(page.locator("main .notice").last.inner_text())
        if "amount" in typed:
            page.get_by_label(re.compile("^Amount to refund")).fill(typed["amount"])
        if "reason" in typed:
            page.locator("#reason").fill(typed["reason"])
        page.locator("main form button[type=submit]").click()
        page.wait_for_url(re.compile(r"/desk\?case="))
        return said

    def close(self) -> None:
        self.context.close()


def case_id_of(person: Person, amount: str) -> str:
    link = person.case(amount).locator("h2 a")
    return str(link.inner_text())


def test_the_desk_signed_in_with_slack(demo: Demo, chromium: Any, tmp_path: Path) -> None:
    demo.wait_for_stream()

    # Lee filed the 75.00 USD case: it is not in his queue, and its record offers him no decision.
    lee = Person(chromium, demo, LEE)
    lee.open("/desk")
    lee.page.locator("section.case").first.wait_for()
    assert lee.case("75.00").count() == 0
    lina = Person(chromium, demo, LINA)
    lina.open("/desk")
    toaster = case_id_of(lina, "75.00")
    lee.open(f"/desk/cases/{toaster}")
    assert "filed a request for 75.00 USD" in lee.page.inner_text("main")
    assert lee.page.get_by_role("link", name="Decide in my queue").count() == 0
    lee.close()

    # Lina approves it: the confirmation says what her click does, as Slack's modal does.
    said = lina.decide("75.00", "Approve")
    assert "Refunds 75.00 USD now" in said, said
    lina.page.screenshot(path=str(shots(tmp_path) / "desk-queue.png"))
    said = lina.decide("150.00", "Approve partially", amount="100.00", reason="Half, as agreed.")
    assert "150.00 USD" in said, said
    lina.decide("45.00", "Deny", reason="Opened and used.")
    lina.page.get_by_text("Nothing waits for you.").wait_for()
    record = lina.open(f"/desk/cases/{toaster}")
    record.get_by_text("Lina Haddad approved 75.00 USD").wait_for()
    lina.page.set_viewport_size(PHONE)
    lina.check("the record at a phone's width")
    lina.open("/desk")
    lina.page.set_viewport_size({"width": 1280, "height": 800})
    lina.close()

    # Tier 4: Farah's approval is the first of two and pays nothing; Felix's pays.
    farah = Person(chromium, demo, FARAH)
    said = farah.decide("60.00", "Approve (1 of 2)")
    assert "nothing is paid yet" in said, said
    farah.decide("320.00", "Escalate", reason="Carrier claim first.")
    farah.close()
    felix = Person(chromium, demo, FELIX)
    felix.decide("60.00", "Approve (2 of 2)")
    felix.close()

    # Maya, a manager, has the escalated case; a click in Slack shows on her open page.
    maya = Person(chromium, demo, MAYA)
    maya.open("/desk")
    escalated = case_id_of(maya, "320.00")
    slack = maya.context.new_page()
    slack.goto(demo.url)
    slack.select_option("#user-picker", MAYA)
    slack.get_by_role("button", name="# finance-approvals").click()
    card = slack.locator(f"#messages > [data-testid=message][data-case='{escalated}']")
    card.get_by_role("button", name="Approve", exact=True).click()
    modal = slack.locator("[data-testid=modal]")
    modal.get_by_role("button", name="Approve").click()
    modal.wait_for(state="detached")
    maya.page.get_by_text("Nothing waits for you.").wait_for(timeout=10_000)
    maya.close()

    # Ada, the viewer, reads everything and decides nothing.
    ada = Person(chromium, demo, ADA)
    assert "Nothing waits for you." in ada.open("/desk").inner_text("main")
    cases = ada.open("/desk/cases?status=refunded")
    listed = cases.locator("tbody th a").all_inner_texts()
    assert toaster in listed and escalated in listed
    cases.get_by_label("Customer email, case, payment or order id").fill(toaster)
    cases.get_by_role("button", name="Search").click()
    ada.check("a search")
    assert cases.locator("tbody th a").all_inner_texts() == [toaster]
    with cases.expect_download() as download:
        cases.get_by_role("link", name="Export these cases as CSV").click()
    exported = Path(download.value.path()).read_text().splitlines()
    assert exported[0].startswith("case_id,correlation_id,source") and len(exported) == 2
    assert toaster in exported[1]
    ada.open(f"/desk/cases/{escalated}").get_by_text("Maya Chen approved").first.wait_for()
    ada.page.screenshot(path=str(shots(tmp_path) / "desk-record.png"), full_page=True)
    ada.open("/desk/policy").get_by_role("link", name="Compare two versions").click()
    ada.check("the policy diff's form")
    ada.open("/desk/policy/diff?a=v1&b=v1")
    insights = ada.open("/desk/insights")
    assert insights.locator("svg").count() >= 6
    insights.screenshot(path=str(shots(tmp_path) / "desk-insights.png"), full_page=True)
    ada.page.set_viewport_size(PHONE)
    ada.check("the insights at a phone's width")
    ada.close()
