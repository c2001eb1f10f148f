"""Slack fixtures: a fake Slack Web API on loopback and a desk wired to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import build
from refund_desk.settings import load_settings
from refund_desk.storage.db import Database
from tests.conftest import _raise_crash, make_settings
from tests.fakes.slack_fake import TOKEN, FakeSlack
from tests.slack_helpers import SIGNING_SECRET, SlackHarness


@pytest.fixture()
def fake() -> Iterator[FakeSlack]:
    slack = FakeSlack()
    slack.url = slack.start()  # type: ignore[attr-defined]
    yield slack
    slack.stop()


@pytest.fixture()
def slack_desk(fake: FakeSlack) -> Iterator[Callable[[str, str], SlackHarness]]:
    """Make a desk on `url` with Slack configured and `policy` published."""
    made: list[tuple[SlackHarness, Database]] = []

    def make(url: str, policy: str) -> SlackHarness:
        settings = make_settings(
            url,
            SLACK_BOT_TOKEN=TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=fake.url,  # type: ignore[attr-defined]
            REFUND_DESK_CHANNEL="C0REFUNDS",
        )
        db = Database.from_url(url)
        runtime = build(settings, db=db, processor=SandboxProcessor(db, crash=_raise_crash))
        harness = SlackHarness(runtime, fake)
        harness.publish(policy)
        made.append((harness, db))
        return harness

    yield make
    for harness, db in made:
        harness.surface.pool.shutdown(wait=True)
        db.dispose()


@pytest.fixture()
def cli_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("REFUND_DESK_SECRET", raising=False)
    load_settings.cache_clear()
    yield tmp_path
    load_settings.cache_clear()
