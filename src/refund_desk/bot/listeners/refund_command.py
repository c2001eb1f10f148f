"""`/refund` files a case for a customer, its form filled in from what was typed after it (an
amount, a payment id, an email, what happened); `/refund help` says how; `/refund find TEXT`
lists the cases matching an email, payment, order or case id; the message shortcut "File a
refund" (`file_refund`) opens the `/refund` modal filled in from the message.

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
from refund_desk.cases.intake import SLACK_JOB, amount_problem, parse_request, submit
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
# PayPal's capture and order ids: upper-case letters and digits, both (not a word, not a number).
PAYPAL_ID = re.compile(r"\b((?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*\d)[A-Z0-9]{10,20})\b")
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
AMOUNT = re.compile(
    r"(?:(?P<sym>[$€£¥])\s?(?P<a>\d+(?:[.,]\d{1,3})?)"
    r"|\b(?P<b>\d+(?:\.\d{1,3})?)\s?(?P<code>[A-Z]{3})\b"
    r"|\b(?P<c2>[A-Z]{3})\s?(?P<c>\d+(?:\.\d{1,3})?))"
)
SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
# A number alone, as typed after `/refund` (not a part of an id, an email or a longer number);
# a sign or a comma is kept, for the form's own check to explain.
BARE_AMOUNT = re.compile(r"(?<![\w.,$€£¥-])-?\d+(?:[.,]\d+)?(?!\w|[.,]\d)")
# Slack's markup in a command's text: <mailto:a@b.c|a@b.c>, <https://…|label>, <https://…>.
SLACK_LINK = re.compile(r"<(?:mailto:)?([^|>]+)(?:\|([^>]+))?>")
REASON_WORDS = (
    ("damaged", ("broken", "damaged", "shattered", "crushed")),
    ("not_received", ("never arrived", "not received", "didn't arrive", "lost")),
    ("duplicate_charge", ("charged twice", "double charged", "duplicate charge")),
    ("wrong_item", ("wrong item", "wrong size", "wrong colour", "wrong color")),
    ("changed_mind", ("changed my mind", "change of mind", "no longer want")),
)
# The modal's labels, for a problem said outside the field it is about.
LABELS = {
    "payment": "Payment id",
    "email": "Customer email",
    "currency": "Currency",
    "amount": "Amount",
    "reason": "Reason",
    "message": "What the customer said",
}
HELP = (
    "*`/refund`* opens the form to file a refund for a customer. Type what you know after it "
    "and the form comes filled in:\n"
    "• an amount (`25`, `25.00`, `$25`, `25 EUR`; none: what is left on the payment)\n"
    "• the payment id: `pi_…`, `ch_…` or `py_…`, or a PayPal capture or order id "
    "(capitals and digits)\n"
    "• the customer's email, and what happened, in your words\n"
    "For example: `/refund 25.00 py_1a2b3c ada@example.com the vase arrived broken`\n"
    "Nothing is filed until you press *File*; the policy then decides, or asks a person.\n"
    "`/refund find EMAIL|PAYMENT|ORDER|CASE_ID` looks up cases."
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
    out.update(_ids_in(text)[0])
    if found := _amount_with_currency(text):
        out.update(amount=found[0], currency=found[1])
    return out | _reason_in(text)


def from_command(text: str, currency: str | None = None) -> dict[str, str]:
    """What `/refund TEXT` says: the payment id, the email, the amount (a number alone is in
    ``currency``, the policy's), and the words left over as what the customer said."""
    plain = SLACK_LINK.sub(lambda link: link.group(2) or link.group(1), text)
    plain = plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    out, rest = _ids_in(plain)
    if found := _amount_with_currency(rest):
        out.update(amount=found[0], currency=found[1])
        rest = rest.replace(found[2], " ", 1)
    elif bare := BARE_AMOUNT.search(rest):
        out["amount"] = bare.group(0)
        rest = rest[: bare.start()] + " " + rest[bare.end() :]
    if currency and "currency" not in out:
        out["currency"] = currency
    said = " ".join(rest.split()).strip(" ,;:.-")
    if any(c.isalpha() for c in said):
        out["message"] = said[:2900]
    return out | _reason_in(said)


def _ids_in(text: str) -> tuple[dict[str, str], str]:
    """The payment id and the email in ``text``; the text without them."""
    out: dict[str, str] = {}
    rest = text
    for key, pattern in (("email", EMAIL), ("payment", PAYMENT_ID), ("payment", PAYPAL_ID)):
        if key not in out and (found := pattern.search(rest)):
            out[key] = found.group(0)
            rest = rest[: found.start()] + " " + rest[found.end() :]
    return out, rest


def _amount_with_currency(text: str) -> tuple[str, str, str] | None:
    """The first amount written with its currency ($42.50, 42.50 EUR, EUR 42.50): the amount,
    the currency and the words as they were written."""
    for found in AMOUNT.finditer(text):
        currency = SYMBOLS.get(found.group("sym") or "") or found.group("code") or found.group("c2")
        amount = (found.group("a") or found.group("b") or found.group("c") or "").replace(",", ".")
        try:
            money.exponent(currency or "")
        except ValueError:  # UnknownCurrency: three capitals that are no currency
            continue
        return amount, str(currency), found.group(0)
    return None


def _reason_in(text: str) -> dict[str, str]:
    lowered = text.lower()
    for reason, words in REASON_WORDS:
        if any(w in lowered for w in words):
            return {"reason": reason}
    return {}


def policy_currency(desk: Desk) -> str | None:
    """The active policy's currency: what an amount typed alone after `/refund` is in."""
    with desk.db.read() as session:
        doc = active_doc(session)
    return doc.currency if doc is not None else None


def filed(case_id: str, case: Case | None) -> str:
    """What the filer reads once the case is on record: where it stands, in words."""
    if case is None:
        return f"Filed case `{case_id}`."
    asked = money.format_money(case.amount, case.currency)
    if case.status in ("received", "advised", "decided"):
        now = "the policy is deciding it now; you get a message when it ends"
    elif case.status == "awaiting_approval":
        now = "it waits for a person's approval; you get a message when it ends"
    else:
        now = case.status.replace("_", " ")
    return f"Filed case `{case_id}` for {asked}: {now}."


def not_filed(exc: InvalidRequest) -> str:
    """Why a `/refund` filing was refused, each field by the label the modal gives it."""
    details = " ".join(
        f"{LABELS.get(k, k.replace('_', ' ').capitalize())}: {v}" for k, v in exc.fields.items()
    )
    said = f"{mrkdwn.render(exc.text)} {mrkdwn.escape(details)}".strip()
    return f":no_entry: The case was not filed: {said}"


def find_cases(desk: Desk, user: str, text: str) -> str:
    """Cases matching an email, payment, order (external id) or case id, newest first."""
    needle = text.strip()
    if not needle:
        return "Usage: `/refund find EMAIL|PAYMENT|ORDER|CASE_ID`"
    with desk.db.read() as session:
        doc = active_doc(session)
        if doc is None or not may_read(doc, user, desk.directory):
            return (
                ":no_entry: Only the policy's leads, approvers, managers, operators and viewers "
                "may look up cases."
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
            f"{c.status.replace('_', ' ')} · payment `{c.payment_id}` · {mrkdwn.when(c.created_at)}"
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
            text = filed(case_id, case)
    except InvalidRequest as exc:
        text = not_filed(exc)
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
        if view_id := job.payload.get("view_id"):  # the modal that said "checking": filed
            done = cards.filed_modal(text).to_dict()
            call = enqueue_call(session, "views.update", view_id=view_id, view=done, otherwise=None)
            jobs.append(call)
        jobs.append(enqueue_tell(session, user, text, channel=channel))
    run_now(desk, jobs)


def register(surface: Surface) -> None:
    app = surface.app

    @app.command("/refund")
    async def on_refund(ack: Any, body: dict[str, Any], client: Any) -> None:
        typed = (body.get("text") or "").strip()
        words = typed.split(maxsplit=1)
        if words and words[0].lower() == "find":
            found = await surface.blocking(
                find_cases, surface.desk, body["user_id"], words[1] if len(words) > 1 else ""
            )
            await ack(text=found)
            return
        if words and words[0].lower().strip("-?") in ("help", ""):
            await ack(text=HELP)
            return
        currency = await surface.blocking(policy_currency, surface.desk)
        view = cards.file_case_modal(body.get("channel_id", ""), from_command(typed, currency))
        await client.views_open(trigger_id=body["trigger_id"], view=view)
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
        typo = amount_problem(values.get("amount") or "", values.get("currency"))
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
