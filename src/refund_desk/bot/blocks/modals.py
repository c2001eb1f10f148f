"""Modal submissions: an approval confirmed, the reason for a denial or an escalation, the
amount of a partial approval."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refund_desk.bot.blocks import cards
from refund_desk.bot.listeners.actions import decide

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def register(surface: Surface) -> None:
    async def on_decision_modal(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Approve (confirmed), deny (a reason), escalate (a reason) or approve partially (an
        amount and a note): one decision path."""
        channel, _, token = str(view.get("private_metadata", "")).partition("|")
        values = cards.modal_values(view)
        await decide(
            surface,
            ack,
            user=body["user"]["id"],
            channel=channel or None,
            token=token,
            reason=values.get("reason"),
            amount=values.get("amount"),
            modal=True,
        )

    for callback_id in ("approve_modal", "deny_modal", "partial_modal", "escalate_modal"):
        surface.app.view(callback_id)(on_decision_modal)
