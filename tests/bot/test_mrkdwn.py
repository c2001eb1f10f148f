"""Slack's markup is written in one place, and what people or policies wrote is escaped there."""

from __future__ import annotations

from refund_desk.bot import mrkdwn
from refund_desk.cases.errors import Refused
from refund_desk.policy import parse_policy
from refund_desk.policy.diff import diff_text
from refund_desk.text import Code, Mark, Person, Strong, text


def test_people_groups_code_strong_and_marks() -> None:
    said = text(
        Mark("published"),
        " ",
        Person("U1"),
        " and ",
        Person("S0123"),
        " set ",
        Strong("v2"),
        " ",
        Code("d3"),
    )
    assert mrkdwn.render(said) == ":rocket: <@U1> and <!subteam^S0123> set *v2* `d3`"


def test_words_from_outside_never_become_mentions_or_links() -> None:
    said = text("customer wrote <!channel> & <https://evil|click>", Code("a<b"))
    assert mrkdwn.render(said) == (
        "customer wrote &lt;!channel&gt; &amp; &lt;https://evil|click&gt;`a&lt;b`"
    )


def test_a_refusal_names_the_decider_as_a_mention() -> None:
    refusal = Refused("already_decided", text("Already decided by ", Person("U9"), "."))
    assert refusal.message == "Already decided by U9."
    assert mrkdwn.render(refusal.text) == "Already decided by <@U9>."


POLICY = """
policy: p
currency: USD
rules:
  - id: small
    when: request.amount <= 50
    outcome: approve
    tier: 2
default: {outcome: review, tier: 3, approvers: support}
approvers:
  support: {members: [U0AAA1], limit: 100}
"""


def test_a_diff_keeps_its_comparisons_in_slack() -> None:
    old = parse_policy(POLICY)
    new = parse_policy(POLICY.replace("<= 50", "<= 80"))
    shown = mrkdwn.render(diff_text(old, new, old="v1", new="v2"))
    assert "`request.amount &lt;=` `50` → `80`" in shown and "<=" not in shown  # &lt; reads <


def test_a_moment_is_slacks_date_formatting_with_a_fallback_that_names_its_zone() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from refund_desk.text import Moment

    at = datetime(2026, 12, 5, 21, 21, 58, tzinfo=UTC)
    shown = mrkdwn.render(text("Published ", Moment(at)))
    assert shown == (
        f"Published <!date^{int(at.timestamp())}^{{date_short_pretty}} {{time}}"
        "|Dec 5, 2026 21:21 UTC>"
    )
    elsewhere = at.astimezone(timezone(timedelta(hours=-5)))  # the same moment, another zone
    assert mrkdwn.when(elsewhere) == mrkdwn.when(at)
