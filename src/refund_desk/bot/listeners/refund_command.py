"""`/refund` files a case for a customer; `/refund find TEXT` lists the cases matching an email,
payment, order or case id; the message shortcut "File a refund" (`file_refund`) opens the
`/refund` modal filled in from the message.

The submission is checked at once (so mistakes show in the modal), then filed by a job through
the same workflow as the API, the operator recorded as the requester.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy import or_, select
from sqlmodel import Session, col

from refund_desk import money
from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks import cards
from refund_desk.bot.outbox import active_doc, enqueue_call, enqueue_tell, run_now
from refund_desk.cases.desk import Desk
from refund_desk.cases.errors import CaseError, InvalidRequest
from refund_desk.cases.intake import SLACK_JOB, parse_request, submit
from refund_desk.cases.people import may_read
from refund_desk.customers.intake import channel_key
from refund_desk.jobs.queue import ClaimedJob, queue
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, Payment

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface

FILE_CASE = "slack.file_case"
CHECKING = ":hourglass_flowing_sand: Checking the payment with the processor…"
FIELD_BLOCKS = {"payment", "email", "currency", "amount", "reason", "message"}
FIND_LIMIT = 15
PAYMENT_ID = re.compile(r"\b((?:pi|py|ch)_[A-Za-z0-9]+)\b")
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
AMOUNT = re.compile(
    r"(?:(?P<sym>[$€£¥])\s?(?P<a>\d+(?:[.,]\d{1,3})?)"
    r"|(?P<b>\d+(?:\.\d{1,3})?)\s?(?P<code>[A-Z]{3})\b"
    r"|(?P<c2>[A-Z]{3})\s?(?P<c>\d+(?:\.\d{1,3})?))"
)
SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
TYPED_AMOUNT = re.compile(r"\d+(?:\.\d+)?")  # what an amount looks like, before its currency


def amount_problem(typed: str | None) -> str | None:
    """What is wrong with the amount as typed in the `/refund` modal, quoting it; None when it
    reads as an amount (its currency's decimals and size are checked with the request) or
    the field was left empty (what is left to refund)."""
    if typed is None or TYPED_AMOUNT.fullmatch(typed):
        return None
    shown = typed if len(typed) <= 20 else typed[:19] + "…"
    return (
        f"“{shown}” is not an amount: type digits with a point, such as 12.50 "
        "(leave the field empty to refund what is left on the payment)."
    )


def within_payment(session: Session, case: Case) -> None:
    """In the capture's transaction: an amount above the whole payment is a slip of the
    keyboard, not a request. It is refused, and the capture rolls back with it (no case, no
    record, no job)."""
    asked = case.requested_amount
    if asked is None:
        return
    paid = session.scalar(select(col(Payment.amount)).where(col(Payment.id) == case.payment_id))
    if paid is not None and asked > paid:
        raise InvalidRequest(
            "amount_over_payment",
            "The amount is more than the whole payment.",
            {
                "amount": f"{money.format_money(asked, case.currency)} is more than the "
                f"{money.format_money(paid, case.currency)} paid"
            },
        )


def prefill(text: str) -> dict[str, str]:
    """What a message says about a refund: payment id, email, amount and currency, and the
    message itself as what the customer said."""
    out: dict[str, str] = {"message": text[:2900]} if text.strip() else {}
    if found := PAYMENT_ID.search(text):
        out["payment"] = found.group(1)
    if found := EMAIL.search(text):
        out["email"] = found.group(0)
    for found in AMOUNT.finditer(text):
        currency = SYMBOLS.get(found.group("sym") or "") or found.group("code") or found.group("c2")
        amount = (found.group("a") or found.group("b") or found.group("c") or "").replace(",", ".")
        try:
            money.exponent(currency or "")
        except ValueError:  # UnknownCurrency: three capitals that are no currency
            continue
        out.update(currency=str(currency), amount=amount)
        break
    lowered = text.lower()
    for reason, words in (
        ("damaged", ("broken", "damaged", "shattered", "crushed")),
        ("not_received", ("never arrived", "not received", "didn't arrive", "lost")),
    ):
        if any(w in lowered for w in words):
            out["reason"] = reason
            break
    return out


def find_cases(desk: Desk, user: str, text: str) -> str:
    """Cases matching an email, payment, order (external id) or case id, newest first."""
    needle = text.strip()
    if not needle:
        return "Usage: `/refund find EMAIL|PAYMENT|ORDER|CASE_ID`"
    with desk.db.read() as session:
        doc = active_doc(session)
        if doc is None or not may_read(doc, user, desk.directory):
            return (
                ":no_entry: Only the policy's leads, approvers, managers and operators may "
                "look up cases."
            )
        conditions = [col(c) == needle for c in (Case.id, Case.payment_id, Case.external_id)]
        if "@" in needle:
            conditions.append(col(Case.email_hash) == desk.vault.email_hash(needle))
        found = session.scalars(
            select(Case)
            .where(or_(*conditions))
            .order_by(col(Case.created_at).desc())
            .limit(FIND_LIMIT)
        ).all()
        lines = [
            f"`{c.id}` · {money.format_money(c.amount, c.currency)} · "
            f"{c.status.replace('_', ' ')} · payment `{c.payment_id}` · {c.created_at:%Y-%m-%d}"
            for c in found
        ]
    if not lines:
        return f"No case matches `{needle}`."
    return f"Cases matching `{needle}`:\n" + "\n".join(lines)


def file_case(desk: Desk, job: ClaimedJob) -> None:
    """The job behind a `/refund` submission: capture, decide, and tell the operator.

    A retried job finds the case it filed by what its capture wrote in the same transaction:
    an intake key of this job's id under the Slack channel's own key (`channel_key`: revoked,
    it never authenticates), which no API request can write or reuse. The case's external id
    (`slack-job-<job id>`) is for people searching; the API refuses that form anyway."""
    user, channel = job.payload["user"], job.payload.get("channel")
    external_id = f"{SLACK_JOB}{job.id}"
    try:
        request = parse_request({**job.payload["request"], "external_id": external_id})
        submitted = submit(
            desk,
            request,
            actor=Actor("human", user),
            api_key_id=channel_key(desk, "slack"),
            idempotency_key=external_id,
            requested_by=user,
            prepare=within_payment,
        )
        if submitted.created:
            desk.start(submitted.job_id)
        case_id = submitted.case_id
        with desk.db.read() as session:
            case = session.get(Case, case_id)
            status = case.status if case else "unknown"
        text = f"Filed case `{case_id}`: {status.replace('_', ' ')}."
    except InvalidRequest as exc:
        details = "; ".join(f"{k}: {v}" for k, v in exc.fields.items())
        said = f"{mrkdwn.render(exc.text)} {mrkdwn.escape(details)}".strip()
        text = f":no_entry: The case was not filed: {said}"
        view_id = job.payload.get("view_id")
        if view_id:  # the modal is still open: say it there, with what they typed kept
            view = cards.file_case_modal(channel or "", job.payload["request"], problem=text)
            with desk.db.write() as session:
                job_id = enqueue_call(
                    session,
                    "views.update",
                    view_id=view_id,
                    view=view.to_dict(),
                    otherwise={"user": user, "text": text, "channel": channel},
                )
            desk.jobs.run_now(job_id)
            return
    jobs = []
    with desk.db.write() as session:
        if job.payload.get("view_id"):  # the modal that said "checking" says it is filed
            done = cards.filed_modal(text)
            jobs.append(enqueue_call(session, "views.update", view_id=job.payload["view_id"],
                                     view=done.to_dict(), otherwise=None))  # fmt: skip
        jobs.append(enqueue_tell(session, user, text, channel=channel))
    run_now(desk, jobs)


def register(surface: Surface) -> None:
    app = surface.app

    @app.command("/refund")
    async def on_refund(ack: Any, body: dict[str, Any], client: Any) -> None:
        words = (body.get("text") or "").strip().split(maxsplit=1)
        if words and words[0].lower() == "find":
            found = await surface.blocking(
                find_cases, surface.desk, body["user_id"], words[1] if len(words) > 1 else ""
            )
            await ack(text=found)
            return
        await client.views_open(
            trigger_id=body["trigger_id"], view=cards.file_case_modal(body.get("channel_id", ""))
        )
        await ack()

    @app.shortcut("file_refund")
    async def on_file_refund(ack: Any, body: dict[str, Any], client: Any) -> None:
        """The message shortcut: the `/refund` modal filled in from the message."""
        message = body.get("message") or {}
        channel = (body.get("channel") or {}).get("id", "")
        view = cards.file_case_modal(channel, prefill(str(message.get("text") or "")))
        await client.views_open(trigger_id=body["trigger_id"], view=view)
        await ack()

    @app.view("file_case_modal")
    async def on_file_case(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        values = cards.modal_values(view)
        data = {k: v for k, v in values.items() if v is not None}
        data["source"] = "slack"
        typo = amount_problem(values.get("amount"))
        if typo is not None:  # never read as "empty": that would mean what is left
            await ack(response_action="errors", errors={"amount": typo})
            return
        try:
            parse_request(data)
        except CaseError as exc:
            errors = {k.split(".")[0]: v for k, v in exc.fields.items() if k in FIELD_BLOCKS}
            await ack(response_action="errors", errors=errors or {"payment": exc.message})
            return
        user, channel = body["user"]["id"], view.get("private_metadata") or None
        payload = {"request": data, "user": user, "channel": channel, "view_id": view.get("id")}

        def file(desk: Desk) -> int:
            with desk.db.write() as session:
                return queue(session, kind=FILE_CASE, payload=payload)

        job_id = await surface.blocking(file, surface.desk)
        # The modal stays open while the processor is asked: a problem shows there, with what
        # was typed, instead of in the channel; on success it closes.
        checking = cards.file_case_modal(channel or "", data, problem=CHECKING)
        await ack(response_action="update", view=checking.to_dict())
        surface.start_jobs([job_id])
