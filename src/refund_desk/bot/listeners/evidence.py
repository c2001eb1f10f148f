"""`Mark checked` on an evidence item of a case card: a person vouches for it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks.evidence import ACTION
from refund_desk.bot.listeners.actions import channel_of, tell
from refund_desk.cases import evidence
from refund_desk.cases.errors import CaseError
from refund_desk.cases.notify import notify
from refund_desk.text import Person, Text, text

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def register(surface: Surface) -> None:
    @surface.app.action(re.compile(rf"^{ACTION}:"))
    async def on_checked(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        case_id, _, evidence_id = str(action.get("value", "")).partition("|")
        user = body["user"]["id"]
        desk = surface.desk

        def check() -> int | Text:
            try:
                evidence.mark_checked(desk, case_id=case_id, evidence_id=evidence_id, user=user)
            except CaseError as exc:
                return exc.text
            with desk.db.write() as session:
                return notify(
                    session,
                    event="case.note",
                    case_id=case_id,
                    text=text(f"Evidence {evidence_id} checked by ", Person(user), "."),
                )

        result = await surface.blocking(check)
        if isinstance(result, Text):
            await tell(surface, channel_of(body), user, f":no_entry: {mrkdwn.render(result)}")
        else:
            surface.start_jobs([result])
