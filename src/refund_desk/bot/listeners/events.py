"""Events API: App Home opened → (re)publish the viewer's home as a job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refund_desk.bot.home import HOME, queue_home

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def register(surface: Surface) -> None:
    @surface.app.event("app_home_opened")
    async def on_home_opened(event: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return
        job_id = await surface.blocking(queue_home, surface.desk, str(event["user"]))
        surface.start_jobs([job_id])


__all__ = ["HOME", "register"]
