"""Slash commands: `/refund` files a case for a customer (`/refund-policy` lives in
`policy_commands.py`).

`/refund` opens its modal first; the submission is checked at once (so mistakes show in the
modal) and then filed by a job, which asks the processor and runs the same workflow as the API
with the operator recorded as the requester.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlmodel import col

from refund_desk.bot.blocks import cards
from refund_desk.bot.outbox import enqueue_tell
from refund_desk.cases.desk import Desk
from refund_desk.cases.errors import CaseError, InvalidRequest
from refund_desk.cases.intake import parse_request, submit
from refund_desk.storage.audit import Actor
from refund_desk.storage.jobs import ClaimedJob, enqueue
from refund_desk.storage.models import Case

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface

FILE_CASE = "slack.file_case"
FIELD_BLOCKS = {"payment", "email", "currency", "amount", "reason", "message"}


def file_case(desk: Desk, job: ClaimedJob) -> None:
    """The job behind a `/refund` submission: capture, decide, and tell the operator."""
    user, channel = job.payload["user"], job.payload.get("channel")
    external_id = f"slack-job-{job.id}"  # a retried job finds the case it already filed
    try:
        with desk.db.read() as session:
            case_id = session.scalar(
                select(col(Case.id)).where(
                    col(Case.source) == "slack", col(Case.external_id) == external_id
                )
            )
        if case_id is None:
            request = parse_request({**job.payload["request"], "external_id": external_id})
            submitted = submit(desk, request, actor=Actor("human", user), requested_by=user)
            desk.kick(submitted.job_id)
            case_id = submitted.case_id
        with desk.db.read() as session:
            case = session.get(Case, case_id)
            status = case.status if case else "unknown"
        text = f"Filed case `{case_id}`: {status.replace('_', ' ')}."
    except InvalidRequest as exc:
        details = "; ".join(f"{k}: {v}" for k, v in exc.fields.items())
        text = f":no_entry: The case was not filed: {exc.message} {details}".strip()
    with desk.db.write() as session:
        job_id = enqueue_tell(session, user, text, channel=channel)
    desk.jobs.run_now(job_id)


def register(surface: Surface) -> None:
    app = surface.app

    @app.command("/refund")
    async def on_refund(ack: Any, body: dict[str, Any], client: Any) -> None:
        await client.views_open(
            trigger_id=body["trigger_id"], view=cards.file_case_modal(body.get("channel_id", ""))
        )
        await ack()

    @app.view("file_case_modal")
    async def on_file_case(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        values = cards.modal_values(view)
        data = {k: v for k, v in values.items() if v is not None}
        data["source"] = "slack"
        try:
            parse_request(data)
        except CaseError as exc:
            errors = {k.split(".")[0]: v for k, v in exc.fields.items() if k in FIELD_BLOCKS}
            await ack(response_action="errors", errors=errors or {"payment": exc.message})
            return
        user, channel = body["user"]["id"], view.get("private_metadata") or None

        def queue(desk: Desk) -> int:
            with desk.db.write() as session:
                job = enqueue(
                    session,
                    kind=FILE_CASE,
                    payload={"request": data, "user": user, "channel": channel},
                )
                assert job.id is not None
                return job.id

        job_id = await surface.blocking(queue, surface.desk)
        await ack()
        surface.start_jobs([job_id])
