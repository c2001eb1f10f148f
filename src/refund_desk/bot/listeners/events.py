"""Events API: App Home opened → (re)publish the viewer's home as a job; the bot joined a
channel → post the cards Slack would not take there before."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refund_desk.bot.home import queue_home
from refund_desk.bot.outbox import redeliver

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def register(surface: Surface) -> None:
    @surface.app.event("app_home_opened")
    async def on_home_opened(event: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return
        job_id = await surface.blocking(queue_home, surface.desk, str(event["user"]))
        surface.start_jobs([job_id])

    @surface.app.event("member_joined_channel")
    async def on_joined(event: dict[str, Any]) -> None:
        # Anyone joining is harmless: only cards marked undelivered for the channel move.
        channel = str(event.get("channel") or "")
        if channel:
            surface.start_jobs(await surface.blocking(redeliver, surface.desk, channel))
