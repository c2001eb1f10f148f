"""The one Slack emulator, for `refund-desk demo` and for the tests: the Web API the app calls
(as strict as Slack), a web page that shows the workspace, and signed requests to
`/slack/events` for every click, as Slack sends them.

It is a development, demo and test tool, never used with real Slack credentials.
"""

from __future__ import annotations

from refund_desk.demo.slack.emulator import SlackEmulator
from refund_desk.demo.slack.state import Channel, Message, SlackError, User, Workspace

__all__ = ["Channel", "Message", "SlackEmulator", "SlackError", "User", "Workspace"]
