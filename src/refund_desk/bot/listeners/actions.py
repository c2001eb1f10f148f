"""Button clicks on case cards: Approve, Approve partially, Deny, Escalate.

Approve and Escalate decide in one short transaction, then `ack()`. Deny and Approve partially
need a modal, which is opened first, because its `trigger_id` expires within three seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from slack_sdk.models.views import View

from refund_desk import money
from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks import cards
from refund_desk.bot.home import queue_home
from refund_desk.bot.outbox import enqueue_tell
from refund_desk.cases import approvals, tokens
from refund_desk.cases.desk import Desk

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def channel_of(body: dict[str, Any]) -> str | None:
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
        "channel_id"
    )
    return str(channel) if channel else None


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
        await ack()
        await tell(
            surface, channel, user, f":no_entry: {mrkdwn.render(refusal.text)}", response_url
        )
        return
    await ack()
    jobs = list(outcome.jobs)
    if channel is None:  # clicked in App Home: show the viewer their queue as it is now
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


def register(surface: Surface) -> None:
    app = surface.app

    async def on_approve(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await decide(
            surface,
            ack,
            user=body["user"]["id"],
            channel=channel_of(body),
            token=action["value"],
            response_url=body.get("response_url"),
        )

    def opens(modal: Callable[[str, str], View]) -> Callable[..., Awaitable[None]]:
        async def on_click(ack: Any, body: dict[str, Any], action: Any, client: Any) -> None:
            view = modal(action["value"], channel_of(body) or "")
            await client.views_open(trigger_id=body["trigger_id"], view=view)
            await ack()

        return on_click

    app.action("approve")(on_approve)
    app.action("deny")(opens(cards.deny_modal))
    app.action("escalate")(opens(cards.escalate_modal))  # the managers read why it came to them

    @app.action("approve_partial")
    async def on_partial(
        ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any
    ) -> None:
        try:
            token = tokens.verify(surface.desk.secret, action["value"], now=surface.desk.now())
            ceiling = money.format_money(token.amount, token.currency)
        except tokens.TokenRefused:  # the decision path refuses it and records the refusal
            await on_approve(ack, body, action)
            return
        view = cards.partial_modal(action["value"], channel_of(body) or "", ceiling)
        await client.views_open(trigger_id=body["trigger_id"], view=view)
        await ack()
