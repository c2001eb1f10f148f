"""Slack's mrkdwn for the core's ``Text``: the one place that writes Slack markup for it.

Every string part is escaped as Slack asks (``&``, ``<``, ``>``), so text from a customer, a
policy or a person never turns into a mention, a link or a broadcast. A person whose id is a
user group (``S…``) is mentioned as a group, and a channel's id (``C…``, ``G…``, which the
policy's words name the same way) as a link to the channel: Slack shows each by its name.
"""

from __future__ import annotations

from datetime import UTC, datetime

from refund_desk.policy.schema import People
from refund_desk.text import Code, Mark, Moment, Person, Strong, Text

EMOJI = {
    "ok": ":white_check_mark:",
    "failed": ":x:",
    "refused": ":no_entry:",
    "warning": ":warning:",
    "alert": ":rotating_light:",
    "published": ":rocket:",
    "rolled_back": ":rewind:",
    "paused": ":octagonal_sign:",
    "resumed": ":arrow_forward:",
    "shadow": ":ghost:",
}


def escape(value: str) -> str:
    """Slack's three control characters, escaped as its documentation asks."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mention(user: str) -> str:
    if user.startswith("S"):
        return f"<!subteam^{user}>"
    if user.startswith(("C", "G")):
        return f"<#{user}>"
    return f"<@{user}>"


def mention_people(people: People | None) -> str:
    """Everyone a policy names: `<@U…>` for each member and `<!subteam^S…>` for its user group."""
    if people is None:
        return ""
    named = [mention(m) for m in people.members]
    return " ".join(named + ([mention(people.usergroup)] if people.usergroup else []))


def when(at: datetime | None) -> str:
    """A time the one way people read it in Slack: Slack's date formatting, which each reader
    sees in their own time zone ("Dec 6, 2026 9:21 PM", "today 9:21 PM"); the fallback, for
    clients that cannot format it, is UTC and says so."""
    if at is None:
        return "none"
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    utc = aware.astimezone(UTC)
    stamp = int(utc.timestamp())
    return f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{utc:%b} {utc.day}, {utc:%Y %H:%M} UTC>"


def render(value: Text | str) -> str:
    """mrkdwn for a ``Text``; a plain ``str`` is taken as already written for Slack."""
    if isinstance(value, str):
        return value
    out: list[str] = []
    for part in value:
        if isinstance(part, Person):
            out.append(mention(part.id))
        elif isinstance(part, Code):
            out.append("`" + escape(part.text).replace("`", "'") + "`")
        elif isinstance(part, Strong):
            out.append(f"*{escape(part.text)}*")
        elif isinstance(part, Mark):
            out.append(EMOJI[part.name])
        elif isinstance(part, Moment):
            out.append(when(part.at))
        else:
            out.append(escape(part))
    return "".join(out)
