"""The outbox: every Slack Web API call runs as a job, so an outage or a rate limit delays a
message and loses none. Slack's `Retry-After` is honoured; other failures back off.

The `notify` handler turns the core's notifications into cards and thread replies: a case that
needs a person gets a card in its approver group's channel; everything after goes into its
thread, and every message that carries the case's buttons is updated together.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks import cards
from refund_desk.bot.card_facts import card_context
from refund_desk.cases.desk import Desk
from refund_desk.governance.versions import LoadedPolicy, control, load_version
from refund_desk.storage.jobs import ClaimedJob, RetryLater, enqueue
from refund_desk.storage.models import Approval, Case, Execution, SlackMessage
from refund_desk.text import Text

log = logging.getLogger(__name__)
SLACK_CALL = "slack.call"
READ_METHODS = frozenset(
    {"auth.test", "files.info", "users.info", "conversations.info", "usergroups.users.list"}
)


@dataclass
class Outbox:
    desk: Desk
    client: WebClient
    default_channel: str | None

    # ------------------------------------------------------------ plain calls

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One Web API call, sent as slack_sdk sends it; a rate limit becomes a wait.

        Slack's read methods take their arguments from the query string only (a JSON body is
        ignored), so they go as GET; every other method takes a JSON body.
        """
        try:
            if method in READ_METHODS:
                response = self.client.api_call(method, http_verb="GET", params=params)
            else:
                response = self.client.api_call(method, json=params)
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                delay = float(exc.response.headers.get("Retry-After", "1"))
                log.warning("slack %s rate limited; again in %.0f s", method, delay)
                raise RetryLater(delay, f"slack rate limited on {method}", failed=False) from None
            log.warning("slack %s failed: %s", method, exc.response.get("error", "unknown"))
            raise
        return dict(response.data) if isinstance(response.data, dict) else {}

    def on_call(self, job: ClaimedJob) -> None:
        self.call(job.payload["method"], **job.payload["params"])

    # ------------------------------------------------------------ notifications

    def on_notify(self, job: ClaimedJob) -> None:
        event, case_id = job.payload["event"], job.payload.get("case_id")
        data = job.payload.get("data") or {}
        if case_id is None:
            self._announce(event, data)
            return
        with self.desk.db.read() as session:
            case = session.get(Case, case_id)
            if case is None:
                return
            messages = list(
                session.scalars(
                    select(SlackMessage).where(col(SlackMessage.case_id) == case_id)
                ).all()
            )
            card = next((m for m in messages if m.kind == "card"), None)
            ctx, policy = self._context(session, case)
            line = self._line(session, case, event, data, policy)
        if card is None:
            if case.status not in cards.DECIDABLE:
                return  # decided without a person: no thread to tell
            self._post_card(case, ctx, policy)
            return
        blocks = cards.blocks_json(cards.case_blocks(ctx, secret=self.desk.secret))
        for message in messages:
            self.call(
                "chat.update",
                channel=message.channel,
                ts=message.ts,
                text=cards.fallback_text(case),
                blocks=blocks,
            )
        if line:
            self.call("chat.postMessage", channel=card.channel, thread_ts=card.ts, text=line)
        if event == "case.escalated" and policy is not None and policy.doc.managers:
            self._dm_managers(case, policy, blocks)

    def _context(
        self, session: Session, case: Case
    ) -> tuple[cards.CardContext, LoadedPolicy | None]:
        version = case.policy_version or control(session).active_version
        policy = load_version(session, version) if version else None
        return card_context(session, self.desk, case, policy, clock.now()), policy

    def channel_for(self, case: Case, policy: LoadedPolicy | None) -> str | None:
        if policy is not None:
            group = (case.decision or {}).get("approvers")
            approvers = policy.doc.approvers.get(group) if group else None
            if approvers is not None and approvers.channel:
                return approvers.channel
            channels = policy.doc.channels or {}
            if channels.get("approvals"):
                return str(channels["approvals"])
        return self.default_channel

    def _post_card(self, case: Case, ctx: cards.CardContext, policy: LoadedPolicy | None) -> None:
        channel = self.channel_for(case, policy)
        if channel is None:
            log.warning("case %s needs a person but no approvals channel is set", case.id)
            return
        blocks = cards.blocks_json(cards.case_blocks(ctx, secret=self.desk.secret))
        response = self.call(
            "chat.postMessage", channel=channel, text=cards.fallback_text(case), blocks=blocks
        )
        self._remember(case.id, "card", str(response.get("channel", channel)), str(response["ts"]))

    def _dm_managers(self, case: Case, policy: LoadedPolicy, blocks: list[dict[str, Any]]) -> None:
        assert policy.doc.managers is not None
        with self.desk.db.read() as session:
            already = set(
                session.scalars(
                    select(col(SlackMessage.channel)).where(
                        col(SlackMessage.case_id) == case.id, col(SlackMessage.kind) == "dm"
                    )
                ).all()
            )
        for manager in policy.doc.managers.members:
            opened = self.call("conversations.open", users=manager)
            channel = str(opened["channel"]["id"])
            if channel in already:
                continue
            response = self.call(
                "chat.postMessage", channel=channel, text=cards.fallback_text(case), blocks=blocks
            )
            self._remember(case.id, "dm", channel, str(response["ts"]))

    def _remember(self, case_id: str, kind: str, channel: str, ts: str) -> None:
        with self.desk.db.write() as session:
            session.add(
                SlackMessage(
                    case_id=case_id, kind=kind, channel=channel, ts=ts, created_at=clock.now()
                )
            )

    def _line(
        self,
        session: Session,
        case: Case,
        event: str,
        data: dict[str, Any],
        policy: LoadedPolicy | None,
    ) -> str | None:
        """The thread reply for an event, naming who acted."""
        last = session.scalars(
            select(Approval)
            .where(col(Approval.case_id) == case.id)
            .order_by(col(Approval.created_at).desc())
            .limit(1)
        ).first()
        who = f"<@{last.approver}>" if last else "the policy"
        amount = money.format_money(case.amount, case.currency)
        if event == "case.approval_recorded":
            return (
                f"Approved by <@{data.get('user')}>; another approver is needed (fresh card above)."
            )
        if event == "case.approved":
            wanted = case.asked()
            if wanted is not None and case.amount < wanted:
                amount = f"{money.to_major(case.amount, case.currency)} of " + money.format_money(
                    wanted, case.currency
                )
            return f"Approved by {who} for {amount}; the refund is queued."
        if event == "case.refunded":
            refund = session.scalars(
                select(Execution).where(
                    col(Execution.case_id) == case.id, col(Execution.status) == "succeeded"
                )
            ).first()
            ref = f" (refund `{refund.processor_refund_id}`)" if refund else ""
            wanted = case.asked()
            if wanted is not None and case.amount < wanted:
                whole = money.format_money(wanted, case.currency)
                amount = f"{money.to_major(case.amount, case.currency)} of {whole} (partial)"
            return f":white_check_mark: Refunded {amount}{ref}."
        if event == "case.denied":
            return f"Denied by {who if last and last.decision == 'deny' else 'the policy'}."
        if event == "case.parked":
            return f":octagonal_sign: Parked: {case.park_reason or 'a person must look'}"
        if event == "case.note":
            return f":memo: {mrkdwn.render(Text.from_json(data.get('text')))}"
        if event == "case.reminder":
            group = (case.decision or {}).get("approvers")
            members = (
                policy.doc.approvers[group].members
                if policy and group in (policy.doc.approvers)
                else []
            )
            who = " ".join(f"<@{m}>" for m in members) or "approvers"
            return (
                f":alarm_clock: Reminder for {who}: this case waits for a decision "
                f"by {cards.local_time(case.sla_due_at)}."
            )
        if event == "case.escalated":
            managers = policy.doc.managers.members if policy and policy.doc.managers else []
            whom = " ".join(f"<@{m}>" for m in managers) or "the managers"
            if data.get("basis") == "sla":
                why = "the deadline passed"
            elif data.get("user"):
                said = f": {mrkdwn.escape(str(data['reason']))}" if data.get("reason") else ""
                why = f"asked by <@{data['user']}>{said}"
            else:
                why = "asked by an approver"
            return f":arrow_up: Escalated to {whom} (level {data.get('level')}): {why}."
        if event == "case.awaiting_approval":
            return "Back with the approvers."
        return None

    def _announce(self, event: str, data: dict[str, Any]) -> None:
        """A message about no single case, to the policy's named channel (finance by default)."""
        with self.desk.db.read() as session:
            version = control(session).active_version
            policy = load_version(session, version) if version else None
        channels = (policy.doc.channels or {}) if policy else {}
        if data.get("channel") == "audit" and "audit" not in channels:
            return  # the audit anchor goes to Slack only when the policy names a channel
        channel = channels.get(str(data.get("channel") or "finance")) or self.default_channel
        if channel is None:
            log.warning("no channel for %s: %s", event, data)
            return
        said = Text.from_json(data.get("text")) or Text.of(f"{event}: {data}")
        self.call("chat.postMessage", channel=channel, text=cards._clip(mrkdwn.render(said)))


def enqueue_call(session: Session, method: str, **params: Any) -> int:
    job = enqueue(session, kind=SLACK_CALL, payload={"method": method, "params": params})
    assert job.id is not None
    return job.id
