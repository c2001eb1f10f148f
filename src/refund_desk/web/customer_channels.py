"""Wire the customer channels into the app: routes, the `customer.tell` job, the Slack action.

Kept in one place so the app factory needs one line for all of it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from refund_desk.bot.blocks.evidence import ACTION
from refund_desk.bot.listeners.actions import channel_of, tell
from refund_desk.cases.errors import CaseError
from refund_desk.cases.notify import notify
from refund_desk.customers import evidence
from refund_desk.runtime import Runtime
from refund_desk.web.routes import appeals as appeal_routes
from refund_desk.web.routes import inbound, web_form

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def install(app: FastAPI, runtime: Runtime, surface: Surface | None) -> None:
    for router in (web_form.router, inbound.router, appeal_routes.router):
        app.include_router(router)
    if surface is not None:
        register_slack(surface)


def register_slack(surface: Surface) -> None:
    """`Mark checked` on an evidence item of a case card: a person vouches for it."""

    @surface.app.action(re.compile(rf"^{ACTION}:"))
    async def on_checked(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        case_id, _, evidence_id = str(action.get("value", "")).partition("|")
        user = body["user"]["id"]
        desk = surface.desk

        def check() -> int | str:
            try:
                evidence.mark_checked(desk, case_id=case_id, evidence_id=evidence_id, user=user)
            except CaseError as exc:
                return exc.message
            with desk.db.write() as session:
                return notify(
                    session,
                    event="case.note",
                    case_id=case_id,
                    text=f"Evidence {evidence_id} checked by <@{user}>.",
                )

        result = await surface.blocking(check)
        if isinstance(result, str):
            await tell(surface, channel_of(body), user, f":no_entry: {result}")
        else:
            surface.start_jobs([result])
