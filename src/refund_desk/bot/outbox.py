"""The outbox: every Slack Web API call runs as a job, so an outage or a rate limit delays a
message and loses none. Slack's `Retry-After` is honoured; other failures back off.

`notify` turns the core's notifications into cards and thread replies, each one Slack call in
its own `slack.call` job keyed by the notification and the step, so a rate limit on one (a
manager's DM) never repeats another (the thread line). A card Slack will never take is a
permanent failure: no retries, the case records it and the leads hear the fix (`undelivered`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient
from sqlalchemy import String, cast, or_, select
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks import cards
from refund_desk.bot.card_facts import card_context
from refund_desk.bot.directory import SlackDirectory
from refund_desk.cases.approvals import deciders, may_not_act
from refund_desk.cases.desk import Desk
from refund_desk.cases.notify import notify
from refund_desk.cases.ports import processor_title
from refund_desk.cases.quorum import approval_count, approvals_needed
from refund_desk.governance.versions import LoadedPolicy, control, load_version
from refund_desk.jobs.queue import ClaimedJob, RetryLater, queue
from refund_desk.policy.schema import PolicyDocument
from refund_desk.storage.audit import SYSTEM
from refund_desk.storage.models import Approval, Case, Execution, Job, Payment, SlackMessage
from refund_desk.text import Text

log = logging.getLogger(__name__)

_ROUTING = ("channel", "ts", "thread_ts", "user")  # where a call goes, never what it says
SLACK_CALL = "slack.call"
SLACK_TELL = "slack.tell"
READ_METHODS = frozenset(
    {
        "auth.test",
        "files.info",
        "users.info",
        "conversations.info",
        "usergroups.users.list",
        "chat.getPermalink",
    }
)
# Slack will never take a message there as things stand: retrying cannot help, a person must.
UNDELIVERABLE = frozenset({"not_in_channel", "channel_not_found", "is_archived"})
# An ephemeral that cannot be shown where the person acted (a DM with someone else, a channel
# without the bot): the answer goes to them as a DM instead.
NOT_HERE = UNDELIVERABLE | {"user_not_in_channel", "channel_not_found"}
UNDELIVERED = "not delivered to Slack"
# How a case ended, for the DM to whoever filed it in Slack.
ENDED = {"case.refunded": "was refunded", "case.denied": "was denied", "case.parked": "is parked"}


class Undeliverable(Exception):
    """Slack refused a channel for good (`not_in_channel`, `channel_not_found`, `is_archived`)."""

    def __init__(self, method: str, channel: str, code: str) -> None:
        super().__init__(f"{method} to {channel}: {code}")
        self.method, self.channel, self.code = method, channel, code


def fix_for(channel: str, code: str) -> str:
    """What a lead does so that Slack takes the messages for `channel`."""
    if code == "not_in_channel":
        return (
            f"invite the bot there (`/invite @Refund Desk` in <#{channel}>); the waiting cards "
            "are posted as soon as it joins"
        )
    if code == "is_archived":
        return f"unarchive <#{channel}> or name another channel in the policy"
    return (
        f"`{channel}` does not exist or is private without the bot: invite the bot or fix "
        "the policy's channels"
    )


@dataclass
class Outbox:
    desk: Desk
    client: WebClient
    default_channel: str | None
    directory: SlackDirectory
    desk_url: str | None = None  # the web desk's public address: cards link to the record

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
            code = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            if code in UNDELIVERABLE:
                raise Undeliverable(method, str(params.get("channel", "")), str(code)) from None
            raise
        return dict(response.data) if isinstance(response.data, dict) else {}

    def on_call(self, job: ClaimedJob) -> None:
        """One Slack call; `remember` keeps a posted card or DM with its case."""
        p = job.payload
        params = dict(p["params"])
        if p.get("redraw"):  # its case was erased while it waited: the card as it is now
            with self.desk.db.read() as session:
                case = session.get(Case, str(p["redraw"]))
                if case is None:
                    return
                ctx, _ = self._context(session, case)
            params["text"] = cards.fallback_text(case)
            params["blocks"] = cards.blocks_json(cards.case_blocks(ctx, secret=self.desk.secret))
        if p.get("link"):  # a link to the case thread (a read: repeating it posts nothing)
            params["text"] = f"{params.get('text', '')}{self._permalink(**p['link'])}"
        try:
            response = self.call(p["method"], **params)
        except Undeliverable as exc:
            if (p.get("remember") or {}).get("kind") == "card":
                self.undelivered(str(p["remember"]["case_id"]), exc)
                return
            # Retrying cannot help; the job ends here and says why.
            log.warning("Slack refused %s for good; not retried", exc)
            return
        except SlackApiError as exc:
            if "otherwise" not in p or exc.response.status_code == 429:
                raise
            otherwise = p["otherwise"]  # a modal the person closed meanwhile, say
            if otherwise is None:  # nothing else to say: the modal was only a courtesy
                return
            log.info("slack %s refused (%s); telling the person instead", p["method"], exc)
            with self.desk.db.write() as session:
                job_id = enqueue_tell(session, **otherwise)
            self.desk.jobs.run_now(job_id)
            return
        remember = p.get("remember")
        if remember and response.get("ts"):
            channel = str(response.get("channel") or p["params"].get("channel"))
            self._remember(remember["case_id"], remember["kind"], channel, str(response["ts"]))

    def forget_cases(self, session: Session, case_ids: Sequence[str]) -> None:
        """In an erasure's transaction: waiting calls that carry a rendered card of these cases
        keep only where they go, and draw the card when sent (a thread line names the case, not
        the customer)."""
        if not case_ids:
            return
        mentions = or_(*(cast(col(Job.payload), String).like(f"%{c}%") for c in case_ids))
        waiting = session.scalars(
            # a call that gave up (dead) keeps its payload for ever: it is rewritten too
            select(Job).where(
                col(Job.kind) == SLACK_CALL, col(Job.status).in_(("pending", "dead")), mentions
            )
        ).all()
        for job in waiting:
            payload = dict(job.payload)
            params = dict(payload.get("params") or {})
            if "blocks" not in params:
                continue
            said = json.dumps(payload)
            case_id = next(c for c in case_ids if c in said)
            payload["params"] = {k: params[k] for k in _ROUTING if k in params}
            payload["redraw"] = case_id
            job.payload = payload
            session.add(job)

    def _permalink(self, channel: str, ts: str) -> str:
        try:
            link = self.call("chat.getPermalink", channel=channel, message_ts=ts).get("permalink")
        except (SlackApiError, Undeliverable):
            link = None
        return f" <{link}|Open the case thread>" if link else f" (thread in <#{channel}>)"

    # ------------------------------------------------------------ answering one person

    def on_tell(self, job: ClaimedJob) -> None:
        """`response_url` (Bolt's respond()), else an ephemeral where they acted, else a DM."""
        p = job.payload
        user, channel, text = str(p["user"]), p.get("channel"), str(p["text"])
        if p.get("response_url"):
            try:
                sent = WebhookClient(p["response_url"], timeout=10).send(
                    text=text, response_type="ephemeral", replace_original=False
                )
            except OSError:
                sent = None
            if sent is not None and sent.status_code == 200:
                return
            if sent is not None and sent.status_code == 429:
                delay = float(sent.headers.get("Retry-After", "1"))
                raise RetryLater(delay, "slack rate limited the response_url", failed=False)
        if channel and not str(channel).startswith("D"):
            try:
                self.call("chat.postEphemeral", channel=channel, user=user, text=text)
                return
            except Undeliverable:
                pass
            except SlackApiError as exc:
                if exc.response.get("error") not in NOT_HERE:
                    raise
        self.call("chat.postMessage", channel=user, text=text)

    # ------------------------------------------------------------ undeliverable cards

    def undelivered(self, case_id: str, exc: Undeliverable) -> None:
        """A card Slack will never take: on the case, to the leads, in App Home; no retry."""
        with self.desk.db.read() as session:
            doc = active_doc(session)
        named = list(doc.leads) if doc else []
        leads = self.directory.people(named)  # a group's members: read before the transaction
        with self.desk.db.write() as session:
            already = session.scalars(
                select(SlackMessage).where(
                    col(SlackMessage.case_id) == case_id, col(SlackMessage.kind) == "undelivered"
                )
            ).first()
            if already is not None:
                return
            case = session.get(Case, case_id)
            session.add(
                SlackMessage(
                    case_id=case_id,
                    kind="undelivered",
                    channel=exc.channel,
                    ts=exc.code,
                    created_at=clock.now(),
                )
            )
            self.desk.audit.append(
                session,
                action="slack.undelivered",
                actor=SYSTEM,
                case_id=case_id,
                policy_version=case.policy_version if case else None,
                payload={"channel": exc.channel, "error": exc.code, "status": UNDELIVERED},
            )
            text = (
                f":warning: Case `{case_id}` waits for a person but its card was {UNDELIVERED}: "
                f"Slack answered `{exc.code}` for <#{exc.channel}>. To fix it, "
                f"{fix_for(exc.channel, exc.code)}; App Home lists every undelivered case."
            )
            jobs = [
                enqueue_once(
                    session,
                    f"slack.undelivered:{case_id}:{lead}",
                    "chat.postMessage",
                    channel=lead,
                    text=text,
                )
                for lead in leads
            ]
        log.warning("case %s: card %s (%s)", case_id, UNDELIVERED, exc)
        run_now(self.desk, jobs)

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
        if event in ENDED and case.requested_by and case.source == "slack":
            self._tell_filer(job, case, event, card, line)
        if card is None:
            if case.status not in cards.DECIDABLE:
                return  # decided without a person: no thread to tell
            if any(m.kind == "undelivered" for m in messages):
                return  # the leads know; App Home lists it
            self._post_card(case, ctx, policy)
            return
        blocks = cards.blocks_json(cards.case_blocks(ctx, secret=self.desk.secret))
        fallback = cards.fallback_text(case)
        steps: list[tuple[str, dict[str, Any]]] = [
            ("chat.update", {"channel": m.channel, "ts": m.ts, "text": fallback, "blocks": blocks})
            for m in messages
            if m.kind in ("card", "dm")
        ]
        if line:
            steps.append(
                ("chat.postMessage", {"channel": card.channel, "thread_ts": card.ts, "text": line})
            )
        dms: list[str] = []
        if event == "case.escalated" and policy is not None and (managers := policy.doc.managers):
            dms = self.directory.people([*managers.members, *filter(None, [managers.usergroup])])
        with self.desk.db.write() as session:
            ids = [
                enqueue_once(session, f"notify:{job.id}:{n}", method, **params)
                for n, (method, params) in enumerate(steps)
            ]
            ids += [
                enqueue_once(  # each manager gets the card once per case
                    session,
                    f"slack.dm:{case.id}:{manager}",
                    "chat.postMessage",
                    remember={"case_id": case.id, "kind": "dm"},
                    channel=manager,
                    text=fallback,
                    blocks=blocks,
                )
                for manager in dms
            ]
        run_now(self.desk, ids)

    def _tell_filer(
        self, job: ClaimedJob, case: Case, event: str, card: SlackMessage | None, line: str | None
    ) -> None:
        """Whoever filed the case with /refund hears how it ended, with the thread's link."""
        amount = money.format_money(case.amount, case.currency)
        text = f"The case you filed, `{case.id}` ({amount}), {ENDED[event]}."
        if event == "case.parked":
            text += f" {sentence(case.park_reason or 'A person must look')}"
        elif line:
            text += f" {line}"
        link = {"channel": card.channel, "ts": card.ts} if card is not None else None
        with self.desk.db.write() as session:
            job_id = enqueue_once(
                session,
                f"slack.filer:{job.id}",
                "chat.postMessage",
                link=link,
                channel=str(case.requested_by),
                text=cards._clip(text),
            )
        run_now(self.desk, [job_id])

    def _context(
        self, session: Session, case: Case
    ) -> tuple[cards.CardContext, LoadedPolicy | None]:
        version = case.policy_version or control(session).active_version
        policy = load_version(session, version) if version else None
        ctx = card_context(session, self.desk, case, policy, clock.now(), desk_url=self.desk_url)
        return ctx, policy

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
        try:
            response = self.call(
                "chat.postMessage", channel=channel, text=cards.fallback_text(case), blocks=blocks
            )
        except Undeliverable as exc:
            self.undelivered(case.id, exc)
            return
        self._remember(case.id, "card", str(response.get("channel", channel)), str(response["ts"]))

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
        if event == "case.approval_recorded":
            return self._approval_recorded(session, case, data, policy)
        if event == "case.approved":
            amount = money.format_share(case.amount, case.asked(), case.currency)
            return f"Approved by {who} for {amount}; the refund is queued."
        if event == "case.refunded":
            refund = session.scalars(
                select(Execution).where(
                    col(Execution.case_id) == case.id, col(Execution.status) == "succeeded"
                )
            ).first()
            payment = session.get(Payment, case.payment_id)
            title = processor_title(payment.processor) + " " if payment else ""
            ref = f"; {title}refund `{refund.processor_refund_id}`" if refund else ""
            amount = money.format_share(case.amount, case.asked(), case.currency)
            return f":white_check_mark: Refunded {amount}{ref}."
        if event == "case.denied":
            return f"Denied by {who if last and last.decision == 'deny' else 'the policy'}."
        if event == "case.parked":
            return f":octagonal_sign: Parked: {case.park_reason or 'a person must look'}"
        if event == "case.note":
            return f":memo: {mrkdwn.render(Text.from_json(data.get('text')))}"
        if event == "case.reminder":  # whoever may decide it now, as the card names them
            still = may_not_act(session, case)
            named = mrkdwn.render(deciders(session, case, policy).who(still)) if policy else ""
            who = named or "approvers"
            return (
                f":alarm_clock: Reminder for {who}: this case waits for a decision "
                f"by {mrkdwn.when(case.sla_due_at)}."
            )
        if event == "case.escalated":
            whom = (mrkdwn.mention_people(policy.doc.managers) if policy else "") or "the managers"
            if data.get("basis") == "sla":
                why = "the deadline passed"
            elif data.get("user"):
                said = f": {mrkdwn.escape(str(data['reason']))}" if data.get("reason") else ""
                why = f"asked by <@{data['user']}>{said}"
            else:
                why = "asked by an approver"
            return sentence(f":arrow_up: Escalated to {whom} (level {data.get('level')}): {why}")
        if event == "case.awaiting_approval":
            return "Back with the approvers."
        return None

    def _approval_recorded(
        self, session: Session, case: Case, data: dict[str, Any], policy: LoadedPolicy | None
    ) -> str:
        """ "Approval 1 of 2 by @Farah; still to decide: @Felix." (the card, edited in place,
        says the same)."""
        done, needed = approval_count(session, case), approvals_needed(case)
        line = f"Approval {done} of {needed} by <@{data.get('user')}>"
        if policy is None:
            return f"{line}; another approver decides next."
        still = mrkdwn.render(deciders(session, case, policy).who(may_not_act(session, case)))
        return f"{line}; still to decide: {still or 'nobody else the policy names'}."

    def _announce(self, event: str, data: dict[str, Any]) -> None:
        """A message about no single case, to the policy's named channel (finance by default)."""
        with self.desk.db.read() as session:
            doc = active_doc(session)
        channels = (doc.channels or {}) if doc else {}
        if data.get("channel") == "audit" and "audit" not in channels:
            return  # the audit anchor goes to Slack only when the policy names a channel
        channel = channels.get(str(data.get("channel") or "finance")) or self.default_channel
        if channel is None:
            log.warning("no channel for %s: %s", event, data)
            return
        said = Text.from_json(data.get("text")) or Text.of(f"{event}: {data}")
        self.call("chat.postMessage", channel=channel, text=cards._clip(mrkdwn.render(said)))


def sentence(line: str) -> str:
    """``line`` ended by one full stop: a note a person typed may end with its own."""
    return line if line.rstrip().endswith((".", "!", "?", "…")) else f"{line}."


def active_doc(session: Session) -> PolicyDocument | None:
    """The active policy, or None before the first publish."""
    version = control(session).active_version
    return load_version(session, version).doc if version else None


def redeliver(desk: Desk, channel: str) -> list[int]:
    """The bot is in `channel` now: the cards Slack would not take there are posted again (the
    waiting ones), by a `notify` job each, queued with the undelivered marks removed."""
    with desk.db.write() as session:
        rows = session.scalars(
            select(SlackMessage)
            .join(Case, col(Case.id) == col(SlackMessage.case_id))
            .where(
                col(SlackMessage.kind) == "undelivered",
                col(SlackMessage.channel) == channel,
                col(Case.status).in_(cards.DECIDABLE),
            )
        ).all()
        jobs = []
        for row in rows:
            assert row.case_id is not None
            session.delete(row)
            desk.audit.append(
                session,
                action="slack.redelivered",
                actor=SYSTEM,
                case_id=row.case_id,
                payload={"channel": channel},
            )
            jobs.append(notify(session, event="case.awaiting_approval", case_id=row.case_id))
    return jobs


_NO_FALLBACK = object()


def enqueue_call(
    session: Session, method: str, *, otherwise: Any = _NO_FALLBACK, **params: Any
) -> int:
    """One Slack call as a job. ``otherwise``: when Slack refuses it for good (a modal the
    person closed, say), tell them this instead (``enqueue_tell``'s arguments), or, with None,
    let it go."""
    payload: dict[str, Any] = {"method": method, "params": params}
    if otherwise is not _NO_FALLBACK:
        payload["otherwise"] = otherwise
    return queue(session, kind=SLACK_CALL, payload=payload)


def enqueue_once(
    session: Session,
    key: str,
    method: str,
    *,
    remember: dict[str, Any] | None = None,
    link: dict[str, str] | None = None,
    **params: Any,
) -> int | None:
    """One Slack call as its own job, at most once per `key` (None: already queued);
    `remember` keeps the posted message with its case, `link` adds the permalink of a thread."""
    if session.scalar(select(col(Job.id)).where(col(Job.dedupe_key) == key)) is not None:
        return None
    payload: dict[str, Any] = {"method": method, "params": params}
    if remember:
        payload["remember"] = remember
    if link:
        payload["link"] = link
    return queue(session, kind=SLACK_CALL, payload=payload, dedupe_key=key)


def enqueue_tell(
    session: Session,
    user: str,
    text: str,
    *,
    channel: str | None = None,
    response_url: str | None = None,
) -> int:
    """An answer only `user` sees: response_url, else an ephemeral in `channel`, else a DM."""
    payload = {"user": user, "text": text, "channel": channel, "response_url": response_url}
    return queue(session, kind=SLACK_TELL, payload=payload)


def run_now(desk: Desk, job_ids: Iterable[int | None]) -> None:
    """Run queued jobs at once, in order (None: queued before, by someone else); a step that
    has to wait is left to the sweeps."""
    for job_id in job_ids:
        if job_id is not None:
            desk.jobs.run_now(job_id)
