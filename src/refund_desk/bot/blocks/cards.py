"""Block Kit for a case, built with slack_sdk's models so Slack's limits are checked here.

The card shows what an approver needs and nothing more: the amount, the order's facts, the
rule and policy version, the tier and deadline, the advisor's summary (labelled advisory), the
masked customer, duplicate links. Its buttons carry signed single-use tokens, never decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    EmailInputElement,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from refund_desk import money
from refund_desk.bot.blocks.evidence import evidence_blocks
from refund_desk.cases import tokens
from refund_desk.cases.ports import REASONS
from refund_desk.storage.models import Case

MAX_TEXT = 2900  # Slack refuses section text over 3,000 characters
DECIDABLE = ("awaiting_approval", "parked")


@dataclass(frozen=True)
class CardContext:
    case: Case
    email: str | None
    approvals: int
    needed: int
    channel_group: str | None
    now: datetime


def mask_email(email: str | None) -> str:
    if not email or "@" not in email:
        return "unknown"
    local, _, domain = email.partition("@")
    return f"{local[:1]}{'*' * max(2, len(local) - 1)}@{domain}"


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _money(minor: int | None, currency: str) -> str:
    return "unknown" if minor is None else money.format_money(minor, currency)


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "none"
    stamp = int(moment.timestamp())
    return f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{moment:%Y-%m-%d %H:%M} UTC>"


def case_blocks(ctx: CardContext, *, secret: str) -> list[Block]:
    case = ctx.case
    decision = case.decision or {}
    facts = case.facts or {}
    order = facts.get("order") or {}
    advice = case.advice or {}
    header = (
        f"Refund {money.format_money(case.amount, case.currency)} · {case.status.replace('_', ' ')}"
    )
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=_clip(header, 150)))]
    fields = [
        f"*Amount*\n{money.format_money(case.amount, case.currency)} ({case.amount_source})",
        f"*Payment*\n`{case.payment_id}`",
        f"*Order*\ncaptured {_money(order.get('amount'), case.currency)}, "
        f"refundable {_money(order.get('refundable'), case.currency)}, "
        f"{order.get('age_days', '?')} days old",
        f"*Rule*\n`{decision.get('rule', 'none')}` · policy v{case.policy_version or '-'}",
        f"*Tier*\n{decision.get('tier', '-')} · approvals {ctx.approvals} of {ctx.needed}",
        f"*Decide by*\n{_when(case.sla_due_at)}",
        f"*Customer*\n{mask_email(ctx.email)} "
        f"({'verified' if case.customer_verified else 'NOT verified'})",
        f"*Reason*\n{case.reason or 'unknown'} ({case.reason_source or '-'})",
    ]
    blocks.append(SectionBlock(fields=[MarkdownTextObject(text=_clip(f, 1900)) for f in fields]))
    notes: list[str] = []
    if case.possible_duplicate:
        notes.append(f":warning: Possible duplicate of `{case.duplicate_of}`")
    if case.park_reason:
        notes.append(f":octagonal_sign: {case.park_reason}")
    if decision.get("counterfactual"):
        notes.append(f":bulb: {decision['counterfactual']}")
    if advice.get("injection_suspected"):
        notes.append(":rotating_light: The message looks like it tries to instruct the system.")
    if ctx.channel_group:
        notes.append(f"Approver group: *{ctx.channel_group}*")
    if case.escalation_level:
        notes.append(f"Escalated (level {case.escalation_level})")
    if notes:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=_clip("\n".join(notes)))))
    blocks.extend(evidence_blocks(case, decidable=case.status in DECIDABLE))
    advisory = advice.get("explanation") or advice.get("summary")
    if advisory:
        label = (
            f"*Advisory (AI, {advice.get('provider', 'offline')}, "
            f"confidence {float(advice.get('confidence') or 0):.0%}; not a decision):*"
        )
        blocks.append(
            ContextBlock(elements=[MarkdownTextObject(text=_clip(f"{label} {advisory}", 1900))])
        )
    if case.status in DECIDABLE:
        blocks.append(DividerBlock())
        blocks.append(ActionsBlock(block_id="decide", elements=_buttons(case, ctx.now, secret)))
    elif case.customer_message:
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(text=_clip(f"Customer told: {case.customer_message}", 1900))
                ]
            )
        )
    return blocks


def _buttons(case: Case, now: datetime, secret: str) -> list[ButtonElement]:
    def token(action: str) -> str:
        return tokens.issue(
            secret,
            case_id=case.id,
            action=action,
            amount=case.amount,
            currency=case.currency,
            revision=case.revision,
            policy_version=case.policy_version,
            now=now,
        )

    amount = money.format_money(case.amount, case.currency)
    return [
        ButtonElement(
            text="Approve",
            action_id="approve",
            value=token("approve"),
            style="primary",
            confirm=ConfirmObject(
                title="Approve this refund?",
                text=f"{amount} will be refunded to the customer's payment.",
                confirm="Approve",
                deny="Cancel",
            ),
        ),
        ButtonElement(
            text="Approve partially", action_id="approve_partial", value=token("approve_partial")
        ),
        ButtonElement(text="Deny", action_id="deny", value=token("deny"), style="danger"),
        ButtonElement(text="Escalate", action_id="escalate", value=token("escalate")),
    ]


def fallback_text(case: Case) -> str:
    amount = money.format_money(case.amount, case.currency)
    return f"Refund {amount} for {case.payment_id}: {case.status}"


# ---------------------------------------------------------------- modals


def deny_modal(token: str, channel: str) -> View:
    return View(
        type="modal",
        callback_id="deny_modal",
        private_metadata=f"{channel}|{token}",
        title="Deny refund",
        submit="Deny",
        close="Cancel",
        blocks=[
            InputBlock(
                block_id="reason",
                label="Reason (the customer will read this)",
                element=PlainTextInputElement(action_id="value", multiline=True, max_length=2000),
            )
        ],
    )


def partial_modal(token: str, channel: str, ceiling: str) -> View:
    return View(
        type="modal",
        callback_id="partial_modal",
        private_metadata=f"{channel}|{token}",
        title="Approve partially",
        submit="Approve",
        close="Cancel",
        blocks=[
            InputBlock(
                block_id="amount",
                label=f"Amount to refund (at most {ceiling})",
                element=NumberInputElement(
                    action_id="value", is_decimal_allowed=True, placeholder="12.50"
                ),
            ),
            InputBlock(
                block_id="reason",
                label="Note for the customer",
                optional=True,
                element=PlainTextInputElement(action_id="value", multiline=True, max_length=2000),
            ),
        ],
    )


def file_case_modal(channel: str, prefill: dict[str, str] | None = None) -> View:
    """The `/refund` modal; `prefill` (payment, email, currency, amount, reason, message) comes
    from a message the "File a refund" shortcut was used on."""
    given = prefill or {}

    def initial(key: str) -> dict[str, Any]:
        return {"initial_value": given[key]} if given.get(key) else {}

    reason = [Option(value=r, text=r.replace("_", " ")) for r in REASONS]
    chosen = next((o for o in reason if o.value == given.get("reason")), None)
    return View(
        type="modal",
        callback_id="file_case_modal",
        private_metadata=channel,
        title="File a refund",
        submit="File",
        close="Cancel",
        blocks=[
            InputBlock(
                block_id="payment",
                label="Payment id",
                element=PlainTextInputElement(
                    action_id="value", placeholder="pi_… or py_…", **initial("payment")
                ),
            ),
            InputBlock(
                block_id="email",
                label="Customer email",
                element=EmailInputElement(action_id="value", **initial("email")),
            ),
            InputBlock(
                block_id="currency",
                label="Currency",
                element=PlainTextInputElement(
                    action_id="value", placeholder="USD", **initial("currency")
                ),
            ),
            InputBlock(
                block_id="amount",
                label="Amount (empty: what is left to refund)",
                optional=True,
                element=NumberInputElement(
                    action_id="value", is_decimal_allowed=True, **initial("amount")
                ),
            ),
            InputBlock(
                block_id="reason",
                label="Reason",
                element=StaticSelectElement(
                    action_id="value",
                    options=reason,
                    initial_option=chosen,
                ),
            ),
            InputBlock(
                block_id="message",
                label="What the customer said",
                optional=True,
                element=PlainTextInputElement(
                    action_id="value", multiline=True, **initial("message")
                ),
            ),
        ],
    )


def modal_values(view: dict[str, Any]) -> dict[str, str | None]:
    """Flatten a submitted view's state: block id -> the single input's value."""
    out: dict[str, str | None] = {}
    for block_id, actions in view.get("state", {}).get("values", {}).items():
        for element in actions.values():
            if element.get("type") == "static_select":
                selected = element.get("selected_option") or {}
                out[block_id] = selected.get("value")
            else:
                value = element.get("value")
                out[block_id] = value.strip() if isinstance(value, str) and value.strip() else None
    return out


def blocks_json(blocks: list[Block]) -> list[dict[str, Any]]:
    return [b.to_dict() for b in blocks]
