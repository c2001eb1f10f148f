"""Slack fixtures: the Slack emulator served on loopback and a desk wired to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from refund_desk.demo.slack import SlackEmulator
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import build
from refund_desk.storage.db import Database
from tests.conftest import _raise_crash, make_settings
from tests.slack_helpers import SIGNING_SECRET, TOKEN, SlackHarness, emulator


@pytest.fixture()
def slack() -> Iterator[SlackEmulator]:
    with emulator() as served:
        yield served


@pytest.fixture()
def slack_desk(slack: SlackEmulator) -> Iterator[Callable[..., SlackHarness]]:
    """Make a desk on `url` with Slack configured and `policy` published (`settings`: more)."""
    made: list[tuple[SlackHarness, Database]] = []

    def make(url: str, policy: str, **settings_kw: str) -> SlackHarness:
        settings = make_settings(
            url,
            SLACK_BOT_TOKEN=TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.api_url,
            REFUND_DESK_CHANNEL="C0REFUNDS",
            **settings_kw,
        )
        db = Database.from_url(url)
        runtime = build(settings, db=db, processor=SandboxProcessor(db, crash=_raise_crash))
        harness = SlackHarness(runtime, slack)
        harness.publish(policy)
        made.append((harness, db))
        return harness

    yield make
    for harness, db in made:
        harness.surface.pool.shutdown(wait=True)
        harness.surface.ack_pool.shutdown(wait=True)
        db.dispose()
