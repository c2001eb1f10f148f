"""The Slack fixtures of `tests/bot`, for the demo's policy on a desk wired to Slack."""

from __future__ import annotations

from tests.bot.conftest import slack, slack_desk

__all__ = ["slack", "slack_desk"]
