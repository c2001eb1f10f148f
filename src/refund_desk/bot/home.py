"""App Home: undelivered cases (for the leads and the people who decide them), the viewer's
queue (oldest first, with SLA time left, why each case is theirs, and only those of the card's
Approve / Approve partially / Deny / Escalate buttons whose click the viewer may make),
recent decisions, and which rules fired this week (those two, like case details everywhere,
only for the people `may_read` names; others see a short note)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View
from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.bot.blocks.cards import (
    DECIDABLE,
    CardContext,
    _buttons,
    _clip,
    until,
    words,
)
from refund_desk.bot.mrkdwn import render, when
from refund_desk.bot.outbox import active_doc, fix_for
from refund_desk.cases import tokens
from refund_desk.cases.approvals import may_decide, preview_in
from refund_desk.cases.desk import Desk
from refund_desk.cases.errors import CaseError
from refund_desk.cases.people import Directory, is_lead, may_read
from refund_desk.cases.quorum import approval_count, approvals_needed
from refund_desk.jobs.queue import ClaimedJob, queue
from refund_desk.storage.models import Case, SlackMessage
from refund_desk.web.metrics import DRIFT_ALERT, reason_drift

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface

HOME = "slack.home"
QUEUE_LIMIT = 20


def queue_home(desk: Desk, user: str) -> int:
    with desk.db.write() as session:
        return queue(session, kind=HOME, payload={"user": user})


def undelivered(session: Session) -> list[tuple[str, str, str]]:
    """(case, channel, Slack's error) of waiting cases whose card Slack would not take."""
    rows = session.execute(
        select(col(SlackMessage.case_id), col(SlackMessage.channel), col(SlackMessage.ts))
        .join(Case, col(Case.id) == col(SlackMessage.case_id))
        .where(col(SlackMessage.kind) == "undelivered", col(Case.status).in_(DECIDABLE))
        .order_by(col(SlackMessage.id))
        .limit(100)
    ).all()
    return [(str(c), str(ch), str(e)) for c, ch, e in rows]


def _button_context(session: Session, case: Case, now: datetime) -> CardContext:
    """What the card's buttons need (the approval they would be), for the case in App Home."""
    return CardContext(
        case=case,
        email=None,
        approvals=approval_count(session, case),
        needed=approvals_needed(case),
        channel_group=None,
        now=now,
    )


def home_view(
    session: Session, user: str, now: datetime, directory: Directory, secret: str
) -> View:
    waiting = session.scalars(
        select(Case)
        .where(col(Case.status).in_(DECIDABLE))
        .order_by(col(Case.created_at))
        .limit(500)
    ).all()
    mine = [c for c in waiting if may_decide(session, c, user, directory)][:QUEUE_LIMIT]
    blocks: list[Block] = []
    doc = active_doc(session)
    lead = doc is not None and is_lead(doc, user, directory)
    stuck = [
        row
        for row in undelivered(session)
        if lead or ((c := session.get(Case, row[0])) and may_decide(session, c, user, directory))
    ]
    if stuck:
        blocks.append(HeaderBlock(text="Not delivered to Slack"))
        lines = [
            f"`{case_id}` · <#{channel}>: `{error}` — {fix_for(channel, error)}"
            for case_id, channel, error in stuck[:QUEUE_LIMIT]
        ]
        blocks += [_section("\n".join(lines)), DividerBlock()]
    blocks.append(HeaderBlock(text="Waiting for you"))
    if not mine:
        blocks.append(_section("Nothing waits for you."))
    for case in mine:
        blocks += _queued(session, case, user, now, directory, secret)
    if doc is not None and may_read(doc, user, directory):
        blocks += _record(session, now)
    else:  # case details answer the same people on every surface
        blocks += [DividerBlock(), _section(NOT_A_READER)]
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=f"Updated {when(now)}")]))
    return View(type="home", blocks=blocks[:100])


def _queued(
    session: Session, case: Case, user: str, now: datetime, directory: Directory, secret: str
) -> list[Block]:
    """A case in the viewer's queue: what it is, why it is theirs, and only the buttons whose
    click they may make (each asked of the checks the click makes: no Approve above their
    limit)."""
    due = case.sla_due_at  # in the viewer's own time zone
    line = (
        f"*{money.format_money(case.amount, case.currency)}* · {words(case.reason)} · "
        f"`{case.id}` · rule `{(case.decision or {}).get('rule')}` · "
        f"{case.status.replace('_', ' ')} · "
        + (f"due {when(due)} ({until(due, now)})" if due else "no deadline")
    )
    allowed: list[ButtonElement] = []
    who, why_not = "", ""
    for button in _buttons(_button_context(session, case, now), secret):
        token = tokens.verify(secret, str(button.value), now=now)
        try:
            seen = preview_in(session, case, token, user, directory)
        except CaseError as refusal:
            if button.action_id == "approve":  # over their limit, say: the reason, in words
                why_not = f" {render(refusal.text)}"
            continue
        allowed.append(button)
        who = who or f"{render(seen.who)}."
    if not allowed:
        return []
    return [
        _section(line),
        ContextBlock(elements=[MarkdownTextObject(text=_clip(who + why_not, 1900))]),
        ActionsBlock(block_id=f"decide-{case.id}", elements=allowed),
    ]


NOT_A_READER = (
    "Decisions and the rules that fired are shown to the policy's leads, approvers, "
    "managers, operators and viewers."
)


def _record(session: Session, now: datetime) -> list[Block]:
    """Recent decisions, input drift and the rules fired this week: for `may_read` only."""
    recent = session.scalars(
        select(Case)
        .where(col(Case.status).in_(["refunded", "denied"]))
        .order_by(col(Case.updated_at).desc())
        .limit(10)
    ).all()
    week = session.scalars(
        select(Case).where(col(Case.created_at) >= now - timedelta(days=7)).limit(5000)
    ).all()
    fired = Counter(str((c.decision or {}).get("rule")) for c in week if c.decision)
    blocks: list[Block] = [DividerBlock(), HeaderBlock(text="Recent decisions")]
    lines = [
        f"{'✅' if c.status == 'refunded' else '✖️'} {money.format_money(c.amount, c.currency)} "
        f"`{c.id}` {c.status}"
        for c in recent
    ]
    blocks.append(_section("\n".join(lines) or "None yet."))
    moved = [
        f"`{reason}`: {now_share:.0%} this week, {before:.0%} the four weeks before"
        for reason, (now_share, before) in sorted(reason_drift(session, now).items())
        if abs(now_share - before) >= DRIFT_ALERT and before > 0
    ]
    if moved:
        blocks.append(_section(":chart_with_upwards_trend: *Input drift*\n" + "\n".join(moved)))
    blocks += [DividerBlock(), HeaderBlock(text="Rules fired this week")]
    rules = "\n".join(f"`{rule}`: {n}" for rule, n in fired.most_common(15))
    blocks.append(_section(rules or "No decisions yet."))
    return blocks


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=_clip(text)))


def publish_home(surface: Surface, job: ClaimedJob) -> None:
    user = str(job.payload["user"])
    surface.directory.refresh()
    with surface.desk.db.read() as session:
        view = home_view(session, user, clock.now(), surface.directory, surface.desk.secret)
    surface.outbox.call("views.publish", user_id=user, view=view.to_dict())
