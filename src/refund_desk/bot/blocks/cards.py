"""Block Kit for a case, built with slack_sdk's models so Slack's limits are checked here.

A card is read in three seconds, and every number on it is true when it is drawn: what is still
refundable is recomputed on every update, a partial refund reads "of" what was asked, and
"Customer told" appears only for a message that was delivered. Buttons carry signed single-use
tokens, never decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
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
from refund_desk.advisor.language import not_learned
from refund_desk.bot.blocks.evidence import evidence_blocks
from refund_desk.bot.mrkdwn import escape, mention, render, when
from refund_desk.cases import tokens
from refund_desk.cases.ports import REASONS, processor_title
from refund_desk.storage.models import Case

if TYPE_CHECKING:
    from refund_desk.cases.approvals import Deciders, Preview

MAX_TEXT = 2900  # Slack refuses section text over 3,000 characters
DECIDABLE = ("awaiting_approval", "parked")
FINAL = ("refunded", "denied", "failed")


@dataclass(frozen=True)
class Decider:
    """A person's decision on the card: who, what, when, and the note they gave."""

    user: str
    decision: str  # approve | deny | escalate
    at: datetime
    amount: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Told:
    """The customer message of the case's outcome, as sent (or not)."""

    text: str
    channel: str | None  # email | webhook | zendesk | ... ; None: nowhere to send it
    status: str  # queued | sent | recorded | failed | withdrawn


@dataclass(frozen=True)
class CardContext:
    case: Case
    email: str | None
    approvals: int
    needed: int
    channel_group: str | None
    now: datetime
    authority: Deciders | None = None  # who may decide now (`cases.approvals.deciders`)
    not_acting: frozenset[str] = frozenset()  # people who may not (`approvals.may_not_act`)
    why: str | None = None  # why a person is needed, in words
    asked: int | None = None  # what the customer asked for, when it differs from the case
    left: int | None = None  # still refundable on the payment, by our record, now
    refunded: int = 0  # paid out on this case
    deciders: tuple[Decider, ...] = ()  # this round's approvals, the deny, escalations
    told: Told | None = None
    summary: str = ""  # the advisor's summary, unsealed (it quotes the customer)
    evidence: tuple[dict[str, Any], ...] = ()  # the case's evidence, its links and names unsealed
    processor: str | None = None  # the payment's ("paypal")
    record_url: str | None = None  # the case's record on the web desk (`/desk/cases/{id}`)


def mask_email(email: str | None) -> str:
    if not email or "@" not in email:
        return "unknown"
    local, _, domain = email.partition("@")
    return f"{local[:1]}{'*' * max(2, len(local) - 1)}@{domain}"


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _money(minor: int | None, currency: str) -> str:
    return "unknown" if minor is None else money.format_money(minor, currency)


def until(moment: datetime | None, now: datetime) -> str | None:
    """ "in 3 h 58 min", "2 min ago"; None without a moment."""
    if moment is None:
        return None
    seconds = int((moment - now).total_seconds())
    minutes = abs(seconds) // 60
    days, hours, mins = minutes // 1440, minutes % 1440 // 60, minutes % 60
    if days:
        span = f"{days} d {hours} h"
    elif hours:
        span = f"{hours} h {mins} min"
    else:
        span = f"{max(mins, 1)} min"
    return f"in {span}" if seconds >= 0 else f"{span} ago"


def likelihood(confidence: float) -> str:
    """The advisor's confidence in words a person weighs, never a percentage: a model's
    "100%" is not a certainty."""
    if confidence >= 0.9:
        return "very likely"
    if confidence >= 0.7:
        return "likely"
    if confidence >= 0.5:
        return "possibly"
    return "a guess"


def words(value: str | None) -> str:
    return (value or "unknown").replace("_", " ").replace("-", " ")


def _paid_line(ctx: CardContext) -> str:
    """ "Refunded 200.00 of 320.00 USD (partial)" or "Refunded 45.00 USD"."""
    case = ctx.case
    paid = ctx.refunded or case.amount
    return f"Refunded {money.format_share(paid, ctx.asked, case.currency)}"


def header_line(ctx: CardContext) -> str:
    """What is asked and where it stands, in one plain line (Block Kit headers are plain)."""
    case = ctx.case
    amount = money.format_money(case.amount, case.currency)
    if case.status in DECIDABLE:
        still = max(ctx.needed - ctx.approvals, 1)
        people = "approver" if still == 1 else "approvers"
        whom = _whom(ctx)
        parts = [amount, words(case.reason), f"needs {still} {people} from {whom}"]
        due = until(case.sla_due_at, ctx.now)
        if case.status == "parked":
            parts[2] = "parked: " + parts[2]
        if due:
            parts.append(
                f"due {due}" if due.startswith("in") else f"overdue {due.removesuffix(' ago')}"
            )
        return " · ".join(parts)
    if case.status == "refunded":
        return _paid_line(ctx)
    if case.status == "denied":
        return f"Denied · {amount} · {words(case.reason)}"
    if case.status in ("approved", "executing"):
        return f"Approved · paying {amount}"
    return f"{words(case.status).capitalize()} · {amount}"


def _whom(ctx: CardContext) -> str:
    """Whom the header asks, in words: the group, the group or the managers (the deadline
    passed), or the managers alone (a person escalated it)."""
    authority = ctx.authority
    if authority is None:
        return words(ctx.channel_group or "the group")
    if authority.group is None:
        return "the managers"
    if authority.managers is not None:
        return f"{words(authority.group)} or the managers"
    return words(authority.group)


def _who(ctx: CardContext) -> str:
    """Everyone who may still decide now, mentioned: people as `<@U…>`, user groups as
    `<!subteam^S…>`, exactly those a click accepts; not the filer, not who approved already."""
    if ctx.authority is None:
        return "nobody (the policy names no one)"
    if not ctx.authority.who():
        return "nobody (the policy names no one)"
    named = render(ctx.authority.who(ctx.not_acting))
    return named or "nobody else the policy names: escalate it to the managers"


def _note(text: str | None) -> str | None:
    return escape(text.strip()) if text and text.strip() else None


def _decided_line(ctx: CardContext) -> str | None:
    """Who decided, when, and with what note; in place of the buttons once decided."""
    case = ctx.case
    rule = escape(str((case.decision or {}).get("rule")))
    approvals = [d for d in ctx.deciders if d.decision == "approve"]
    denial = next((d for d in reversed(ctx.deciders) if d.decision == "deny"), None)
    if case.status == "denied":
        if denial is None:
            return f":no_entry_sign: Denied by the policy (rule `{rule}`)"
        reason = _note(denial.reason)
        said = f": {reason}" if reason else ""
        return f":no_entry_sign: Denied by {mention(denial.user)} · {when(denial.at)}{said}"
    if case.status in ("approved", "executing", "refunded"):
        what = _paid_line(ctx) if case.status == "refunded" else "Approved"
        if not approvals:
            return f":white_check_mark: {what} by the policy (rule `{rule}`)"
        names = ", ".join(f"{mention(d.user)} · {when(d.at)}" for d in approvals)
        note = next((n for d in reversed(approvals) if (n := _note(d.reason))), None)
        return f":white_check_mark: {what} by {names}" + (f" · note: {note}" if note else "")
    if approvals:
        last = approvals[-1]
        return (
            f"Approval {ctx.approvals} of {ctx.needed} by {mention(last.user)} · "
            f"{when(last.at)}; another approver decides next."
        )
    return None


def _people_lines(ctx: CardContext) -> list[str]:
    case = ctx.case
    lines: list[str] = []
    if case.status in DECIDABLE:
        lines.append(f"*Decides:* {_who(ctx)}")
        if ctx.why:
            lines.append(f"*Why a person:* {escape(ctx.why)}")
    if case.requested_by:
        lines.append(f"Filed by {mention(case.requested_by)} (they may not decide it)")
    for d in ctx.deciders:
        if d.decision == "escalate":
            why = f": {escape(d.reason.strip())}" if d.reason and d.reason.strip() else ""
            lines.append(f":arrow_up: Escalated by {mention(d.user)} · {when(d.at)}{why}")
    decided = _decided_line(ctx)
    if decided:
        lines.append(decided)
    return lines


def _fields(ctx: CardContext) -> list[str]:
    case = ctx.case
    decision = case.decision or {}
    facts = case.facts or {}
    order = facts.get("order") or {}
    cur = case.currency
    if case.status == "refunded":
        amount = _paid_line(ctx)
    elif ctx.asked is not None and ctx.asked != case.amount:
        amount = (
            f"{money.format_money(case.amount, cur)} (asked {money.format_money(ctx.asked, cur)})"
        )
    else:
        amount = money.format_money(case.amount, cur)
    if case.amount_source == "model_inference":
        amount += " · _AI guess_"
    elif case.amount_source == "human_entry":
        amount += " · _set by an approver_"
    left = ctx.left if ctx.left is not None else order.get("refundable")
    reason = words(case.reason)
    if case.reason_source == "model_inference":
        confidence = (case.advice or {}).get("confidence")
        band = f", {likelihood(float(confidence))}" if confidence is not None else ""
        reason += f" · _AI guess{band}_"
    return [
        f"*Amount*\n{amount}",
        f"*Payment*\n`{escape(case.payment_id)}`"
        + (f" · {processor_title(ctx.processor)}" if ctx.processor else ""),
        f"*Order*\npaid {_money(order.get('amount'), cur)} {order.get('age_days', '?')} days ago"
        f" · still refundable {_money(left, cur)}",
        f"*Customer*\n{'erased' if case.erased_at else escape(mask_email(ctx.email))}"
        f" · {'verified payer' if case.customer_verified else '*not* the payer on record'}",
        f"*Reason*\n{escape(reason)}",
        f"*Rule*\n`{escape(str(decision.get('rule', 'none')))}`"
        f" · policy v{case.policy_version or '-'} · tier {decision.get('tier', '-')}",
        *_decide_by(ctx),
    ]


def _decide_by(ctx: CardContext) -> list[str]:
    """The deadline, while the case waits for a person: a decided card has none."""
    due = ctx.case.sla_due_at
    if ctx.case.status not in DECIDABLE or due is None:
        return []
    return [f"*Decide by*\n{when(due)} ({until(due, ctx.now)})"]


def _advisory(case: Case, summary: str) -> str | None:
    """One line of what the advisor adds beyond the fields: its reading, and any risk."""
    advice = case.advice or {}
    if not advice:
        return None
    if advice.get("error"):
        error = escape(str(advice["error"])[:200])
        return f"Advisory (AI): no advice ({error}); the policy decided without it."
    provider = advice.get("provider", "offline")
    confidence = advice.get("confidence")
    head = (
        f"Advisory (AI, {escape(str(provider))}"
        + (f"; {likelihood(float(confidence))} right" if confidence is not None else "")
        + "; not a decision):"
    )
    new: list[str] = []
    if advice.get("injection_suspected"):
        new.append(":rotating_light: the message tries to instruct the system (treated as data)")
    if advice.get("fallback"):
        new.append("the model failed; this is the offline advisor's reading")
    if advice.get("language_learned") is False:
        new.append(not_learned(advice.get("language")))
    if case.earlier_enc and not case.erased_at:
        new.append("it read only what the customer wrote now; the earlier mails the message quoted"
                   " are on the case (API)")  # fmt: skip
    found = advice.get("amount_minor")
    if (
        isinstance(found, int)
        and found != case.amount
        and advice.get("currency") in (None, case.currency)
    ):
        new.append(f"the message names {money.format_money(found, case.currency)}")
    ref = advice.get("order_ref")
    if ref and str(ref) not in case.payment_id:
        new.append(f"the message names reference `{escape(str(ref))}`")
    if advice.get("reason") and case.reason and advice.get("reason") != case.reason:
        new.append(f"it reads the reason as {words(str(advice['reason']))}")
    summary = summary.strip()
    if summary:
        new.append(f"“{escape(summary[:300])}”")
    return f"{head} {'; '.join(new) if new else 'nothing beyond the facts above.'}"


def told_line(told: Told | None) -> str | None:
    """The truth about the customer message: sent where, or why not."""
    if told is None:
        return None
    said = escape(told.text)
    if told.status == "sent":
        return f"*Customer told* ({told.channel}): {said}"
    if told.status == "queued":
        return f"*Telling the customer* ({told.channel or 'pending'}): {said}"
    if told.status == "failed":
        return f":warning: *Customer not reached* ({told.channel}): not delivered: {said}"
    if told.status == "withdrawn":
        return "*Not sent to the customer:* withdrawn when their personal data was erased."
    return (
        f"*Not sent to the customer:* no customer channel is configured; kept on the case: {said}"
    )


def case_blocks(ctx: CardContext, *, secret: str) -> list[Block]:
    case = ctx.case
    decision = case.decision or {}
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=_clip(header_line(ctx), 150)))]
    people = _people_lines(ctx)
    if people:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=_clip("\n".join(people)))))
    blocks.append(
        SectionBlock(fields=[MarkdownTextObject(text=_clip(f, 1900)) for f in _fields(ctx)])
    )
    notes: list[str] = []
    if case.possible_duplicate:
        notes.append(f":warning: Possible duplicate of `{escape(str(case.duplicate_of))}`")
    if case.park_reason:
        notes.append(f":octagonal_sign: Parked: {escape(case.park_reason)}")
    if decision.get("counterfactual"):
        notes.append(f":bulb: {escape(str(decision['counterfactual']))}")
    if notes:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=_clip("\n".join(notes)))))
    blocks.extend(evidence_blocks(case, ctx.evidence, decidable=case.status in DECIDABLE))
    advisory = _advisory(case, ctx.summary)
    if advisory:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_clip(advisory, 1900))]))
    if case.status in DECIDABLE:
        blocks.append(DividerBlock())
        blocks.append(ActionsBlock(block_id="decide", elements=_buttons(ctx, secret)))
    else:
        told = told_line(ctx.told)
        if told:
            blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_clip(told, 1900))]))
    # The ids an operator searches the logs, the API and the processor's metadata with.
    ids = f"case `{escape(case.id)}` · correlation `{escape(case.correlation_id)}`"
    if ctx.record_url:  # a link, not a button: a button would send Slack an action to answer
        ids = f"<{escape(ctx.record_url)}|Open the case record> · {ids}"
    blocks.append(ContextBlock(block_id="ids", elements=[MarkdownTextObject(text=ids)]))
    return blocks


def _buttons(ctx: CardContext, secret: str) -> list[ButtonElement]:
    case, now = ctx.case, ctx.now

    def token(action: str) -> str:
        return tokens.for_case(secret, case, action, now=now)

    step = f" ({ctx.approvals + 1} of {ctx.needed})" if ctx.needed > 1 else ""
    return [
        # No static confirm: a confirm is the same for every viewer. The click opens a modal
        # that says what this person's click does, or why it is refused (`listeners.actions`).
        ButtonElement(
            text=f"Approve{step}", action_id="approve", value=token("approve"), style="primary"
        ),
        ButtonElement(
            text="Approve partially", action_id="approve_partial", value=token("approve_partial")
        ),
        ButtonElement(text="Deny", action_id="deny", value=token("deny"), style="danger"),
        ButtonElement(text="Escalate", action_id="escalate", value=token("escalate")),
    ]


def record_url(public_url: str | None, case_id: str) -> str | None:
    """The case's record on the web desk, under the desk's public address."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/desk/cases/{quote(case_id, safe='')}"


def fallback_text(case: Case) -> str:
    amount = money.format_money(case.amount, case.currency)
    return f"Refund {amount} for {case.payment_id}: {case.status.replace('_', ' ')}"


# ---------------------------------------------------------------- modals


def text_input(
    block_id: str, label: str, *, optional: bool | None = None, **element: Any
) -> InputBlock:
    """An input block of one plain text input, its action id `value`."""
    field = PlainTextInputElement(action_id="value", **element)
    return InputBlock(block_id=block_id, label=label, optional=optional, element=field)


def preview_text(preview: Preview) -> str:
    """What this person's click does, for the modal it opens: the case, who clicks and why
    the case is theirs, what happens."""
    return "\n".join(
        [f"*{render(preview.case)}*", f"{render(preview.who)}.", render(preview.effect)]
    )


def _preview_block(preview: Preview) -> SectionBlock:
    return SectionBlock(
        block_id="preview", text=MarkdownTextObject(text=_clip(preview_text(preview)))
    )


def approve_modal(preview: Preview, token: str, channel: str) -> View:
    """Approve's confirmation, for the person who clicked: what their click does now."""
    return View(
        type="modal",
        callback_id="approve_modal",
        private_metadata=f"{channel}|{token}",
        title="Approve refund",
        submit="Approve",
        close="Cancel",
        blocks=[_preview_block(preview)],
    )


def refused_modal(said: str) -> View:
    """A click refused before anything happened: why, and about which case."""
    return View(
        type="modal",
        callback_id="decision_refused",
        title="Not done",
        close="Close",
        blocks=[SectionBlock(block_id="refused", text=MarkdownTextObject(text=_clip(said)))],
    )


def _reason_modal(
    preview: Preview, token: str, channel: str, *, title: str, submit: str, label: str, limit: int
) -> View:
    """A decision that needs only a reason: the button's token rides in the metadata."""
    return View(
        type="modal",
        callback_id=f"{preview.action}_modal",
        private_metadata=f"{channel}|{token}",
        title=title,
        submit=submit,
        close="Cancel",
        blocks=[
            _preview_block(preview),
            text_input("reason", label, multiline=True, max_length=limit),
        ],
    )


def deny_modal(preview: Preview, token: str, channel: str) -> View:
    label = "Reason (the customer will read this)"
    return _reason_modal(
        preview, token, channel, title="Deny refund", submit="Deny", label=label, limit=2000
    )


def escalate_modal(preview: Preview, token: str, channel: str) -> View:
    label = "Why the managers should decide"
    title = "Escalate to managers"
    return _reason_modal(
        preview, token, channel, title=title, submit="Escalate", label=label, limit=500
    )


def partial_modal(preview: Preview, token: str, channel: str) -> View:
    ceiling = money.format_money(preview.ceiling or 0, preview.currency)
    return View(
        type="modal",
        callback_id="partial_modal",
        private_metadata=f"{channel}|{token}",
        title="Approve partially",
        submit="Approve",
        close="Cancel",
        blocks=[
            _preview_block(preview),
            InputBlock(
                block_id="amount",
                label=f"Amount to refund (at most {ceiling})",
                element=NumberInputElement(
                    action_id="value", is_decimal_allowed=True, placeholder="12.50"
                ),
            ),
            text_input(
                "reason", "Note for the customer", optional=True, multiline=True, max_length=2000
            ),
        ],
    )


DECISION_MODALS = {
    "approve": approve_modal,
    "approve_partial": partial_modal,
    "deny": deny_modal,
    "escalate": escalate_modal,
}


def file_case_modal(
    channel: str, prefill: dict[str, str] | None = None, *, problem: str | None = None
) -> View:
    """The `/refund` modal; `prefill` (payment, email, currency, amount, reason, message) comes
    from a message the "File a refund" shortcut was used on, or from what was typed when the
    modal is shown again with a `problem` above the fields."""
    given = prefill or {}
    notice: list[Block] = (
        [SectionBlock(block_id="problem", text=MarkdownTextObject(text=_clip(problem, 1900)))]
        if problem
        else []
    )

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
            *notice,
            text_input("payment", "Payment id", placeholder="pi_… or py_…", **initial("payment")),
            InputBlock(
                block_id="email",
                label="Customer email",
                element=EmailInputElement(action_id="value", **initial("email")),
            ),
            text_input("currency", "Currency", placeholder="USD", **initial("currency")),
            # Text, not a number input: a client may hand a number input over empty when
            # letters were typed, and empty means "what is left". The app checks the text.
            text_input(
                "amount",
                "Amount (empty: what is left to refund)",
                optional=True,
                placeholder="12.50",
                max_length=32,
                **initial("amount"),
            ),
            InputBlock(
                block_id="reason",
                label="Reason",
                element=StaticSelectElement(
                    action_id="value", options=reason, initial_option=chosen
                ),
            ),
            text_input(
                "message",
                "What the customer said",
                optional=True,
                multiline=True,
                **initial("message"),
            ),
        ],
    )


def filed_modal(said: str) -> View:
    """What the `/refund` modal shows once the case is filed."""
    return View(
        type="modal",
        callback_id="file_case_done",
        title="File a refund",
        close="Done",
        blocks=[SectionBlock(text=MarkdownTextObject(text=_clip(said, 1900)))],
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
