"""Modal submissions: the reason for a denial or an escalation, the amount of a partial
approval."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refund_desk.bot.blocks import cards
from refund_desk.bot.listeners.actions import decide

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface


def _metadata(view: dict[str, Any]) -> tuple[str | None, str]:
    channel, _, token = str(view.get("private_metadata", "")).partition("|")
    return channel or None, token


def register(surface: Surface) -> None:
    async def on_decision_modal(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Deny (a reason) or approve partially (an amount and a note): one decision path."""
        channel, token = _metadata(view)
        values = cards.modal_values(view)
        await decide(
            surface,
            ack,
            user=body["user"]["id"],
            channel=channel,
            token=token,
            reason=values.get("reason"),
            amount=values.get("amount"),
            modal=True,
        )

    surface.app.view("deny_modal")(on_decision_modal)
    surface.app.view("partial_modal")(on_decision_modal)
    surface.app.view("escalate_modal")(on_decision_modal)
