"""Button clicks on case cards: Approve, Approve partially, Deny, Escalate.

A button is the same for everyone who sees the card, so a click never decides by itself, and
no static confirm speaks for it. Each click opens a modal made for the person who clicked: what
their click will do (`approvals.preview`, the checks the decision itself makes), or why it is
refused, naming the case. The modal is opened before `ack()`, within the three seconds its
`trigger_id` lasts; its submission decides in one short transaction (`approvals.act`), with the
same single-use signed token and the same checks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.views import View

from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks import cards
from refund_desk.bot.home import queue_home
from refund_desk.bot.outbox import enqueue_tell
from refund_desk.cases import approvals
from refund_desk.cases.desk import Desk

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface

log = logging.getLogger(__name__)


def channel_of(body: dict[str, Any]) -> str | None:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
        "channel_id"
    )
    return str(channel) if channel else None


def refusal_words(refusal: approvals.Refused) -> str:
    """ ":no_entry: Case `c1` (600.00 USD, damaged): Only the finance group may decide…" """
    case = refusal.case if isinstance(refusal, approvals.ClickRefused) else None
    about = f"{mrkdwn.render(case)}: " if case else ""
    return f":no_entry: {about}{mrkdwn.render(refusal.text)}"


async def decide(
    surface: Surface,
    ack: Any,
    *,
    user: str,
    channel: str | None,
    token: str,
    reason: str | None = None,
    amount: str | None = None,
    modal: bool = False,
    response_url: str | None = None,
) -> None:
    try:
        outcome = await surface.blocking(
            approvals.act, surface.desk, token_value=token, user=user, reason=reason, amount=amount
        )
    except approvals.Refused as refusal:
        if modal and refusal.code == "invalid_amount":
            await ack(response_action="errors", errors={"amount": refusal.message})
            return
        if modal:  # said where the person is: the modal they submitted
            view = cards.refused_modal(refusal_words(refusal))
            await ack(response_action="update", view=view.to_dict())
            return
        await ack()
        await tell(surface, channel, user, refusal_words(refusal), response_url)
        return
    await ack()
    jobs = list(outcome.jobs)
    if channel is None:  # decided from App Home: show the viewer their queue as it is now
        jobs.append(await surface.blocking(queue_home, surface.desk, user))
    surface.start_jobs(jobs)


async def tell(
    surface: Surface, channel: str | None, user: str, text: str, response_url: str | None = None
) -> None:
    """An answer only `user` sees, as a job: through Slack's `response_url` when the interaction
    has one (Bolt's respond()), else an ephemeral in `channel`, else a DM."""

    def queue(desk: Desk) -> int:
        with desk.db.write() as session:
            return enqueue_tell(session, user, text, channel=channel, response_url=response_url)

    surface.start_jobs([await surface.blocking(queue, surface.desk)])


async def on_click(
    surface: Surface, ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any
) -> None:
    """Any decision button: the modal that says what this person's click does, or why not."""
    user, channel, token = body["user"]["id"], channel_of(body), str(action["value"])
    said: str | None = None  # a refusal, when the modal cannot be shown
    try:
        seen = await surface.blocking(approvals.preview, surface.desk, token_value=token, user=user)
    except approvals.Refused as refusal:
        view: View = cards.refused_modal(refusal_words(refusal))
        said = refusal_words(refusal)
    else:
        view = cards.DECISION_MODALS[seen.action](seen, token, channel or "")
    try:
        await client.views_open(trigger_id=body["trigger_id"], view=view)
    except SlackApiError as exc:  # the trigger expired, say: the answer goes another way
        log.info("views.open refused (%s); telling the person instead", exc)
        await ack()
        text = said or ":warning: That took too long to open; click the button again."
        await tell(surface, channel, user, text, body.get("response_url"))
        return
    await ack()


def register(surface: Surface) -> None:
    async def clicked(ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any) -> None:
        await on_click(surface, ack, body, action, client)

    for action_id in cards.DECISION_MODALS:
        surface.app.action(action_id)(clicked)
