"""People deciding cases: approve, approve partially, deny, escalate.

One click is one short transaction: the token, the revision, the authority and segregation of
duties checked, the token's nonce consumed by recording the decision. A refusal moves nothing
and is recorded in a transaction of its own.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from refund_desk import clock, money
from refund_desk.cases import tokens
from refund_desk.cases.decide import DEFAULT_DENIAL, strictest
from refund_desk.cases.errors import CaseError, Refused
from refund_desk.cases.executor import enqueue_execution
from refund_desk.cases.facts import OPEN_EXECUTION, left_on_record
from refund_desk.cases.lifecycle import Status, move, set_amount
from refund_desk.cases.notify import notify
from refund_desk.cases.people import Directory, is_one_of
from refund_desk.cases.ports import Provenance
from refund_desk.cases.quorum import approvals_needed
from refund_desk.cases.rows import load_for_update, new_revision, on_record
from refund_desk.governance.versions import LoadedPolicy, control, load_version
from refund_desk.policy import approver_limit
from refund_desk.policy.schema import ApproverGroup, Managers
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Approval, Case, Execution
from refund_desk.text import Code, Person, Text, join, text

if TYPE_CHECKING:
    from refund_desk.cases.desk import Desk

DECIDABLE = (Status.awaiting_approval, Status.parked)


@dataclass(frozen=True)
class Outcome:
    case_id: str
    message: str  # what the person who clicked is told
    jobs: list[int] = field(default_factory=list)


def act(
    desk: Desk,
    *,
    token_value: str,
    user: str,
    reason: str | None = None,
    amount: str | None = None,
) -> Outcome:
    """Carry out a button's action for `user`, or raise `Refused` after recording why."""
    case_id: str | None = None
    try:
        token = tokens.verify(desk.secret, token_value, now=desk.now())
        case_id = token.case_id
        # a person's click, before Slack's ack(): ahead of the writers that can wait
        with desk.db.write(urgent=True) as session:
            return _act(desk, session, token, user, reason, amount)
    except IntegrityError:
        # Another click consumed this token, or decided this round, a moment earlier.
        refusal = Refused("already_decided", _already_decided(desk, case_id))
    except CaseError as exc:
        refusal = exc if isinstance(exc, Refused) else Refused(exc.code, exc.text)
    subject = _record_refusal(desk, case_id, user, refusal, claimed=_claimed_case(token_value))
    raise ClickRefused(refusal, subject)


class ClickRefused(Refused):
    """A click refused, naming the case it was about (``case``: None when the button named
    none that can be trusted), so the person hears which case the refusal is about."""

    def __init__(self, refusal: CaseError, case: Text | None) -> None:
        super().__init__(refusal.code, refusal.text, refusal.fields)
        self.case = case


# A click's statements: who used a token, who approved the case in its current round, the
# decision recorded (its nonce consumed), and the refund started whose outcome is not known yet.
_APPROVALS = Approval.__table__  # type: ignore[attr-defined]
_BY_NONCE = select(_APPROVALS.c.approver).where(_APPROVALS.c.token_nonce == bindparam("nonce"))
_ROUND_APPROVERS = select(_APPROVALS.c.approver).where(
    _APPROVALS.c.case_id == bindparam("case_id"),
    _APPROVALS.c.round == bindparam("round"),
    _APPROVALS.c.decision == "approve",
)
_ADD_APPROVAL = insert(_APPROVALS)
_EXECUTIONS = Execution.__table__  # type: ignore[attr-defined]
_OPEN_EXECUTION = select(_EXECUTIONS.c.amount, _EXECUTIONS.c.currency).where(
    _EXECUTIONS.c.case_id == bindparam("case_id"),
    _EXECUTIONS.c.status == OPEN_EXECUTION,
)


def _act(
    desk: Desk,
    session: Session,
    token: tokens.ActionToken,
    user: str,
    reason: str | None,
    amount: str | None,
) -> Outcome:
    case = load_for_update(session, token.case_id)
    _, pay = _admit(session, case, token, user, desk.directory, amount=amount)
    click = _Click(desk, session, case, token, user)
    if token.action == "escalate":
        return _escalate(click, reason)
    if token.action == "deny":
        return _deny(click, reason)
    assert pay is not None
    return _approve(click, pay, reason)


def _admit(
    session: Session,
    case: Case,
    token: tokens.ActionToken,
    user: str,
    directory: Directory | None,
    *,
    amount: str | None,
    before_typing: bool = False,
) -> tuple[LoadedPolicy, int | None]:
    """Every check a click makes before it decides, in order: the token (used, stale, for
    another case state), the duties, the authority and limit, a refund still unresolved, an
    approval already given. The policy and the amount an approval pays (None for a deny, an
    escalation, or a partial approval checked `before_typing` its amount, when only who may
    approve is known); raises `Refused`."""
    _check_token(session, case, token)
    _check_duties(session, case, user)
    policy = _authority_policy(session, case)
    if token.action == "escalate":
        _check_escalation(session, case, policy, user, directory)
        return policy, None
    if token.action == "deny":
        _check_member(session, case, policy, user, directory)
        _check_resolved(session, case, None)
        return policy, None
    if token.action == "approve_partial" and before_typing:
        _check_member(session, case, policy, user, directory)
        _check_not_approved(session, case, user)
        return policy, None
    pay = case.amount
    if token.action == "approve_partial":
        pay = _partial_amount(amount, token, case, left_on_record(session, case.payment_id))
    elif token.amount != case.amount:
        raise Refused("token_mismatch", "This button was made for another amount.")
    _check_authority(session, case, policy, user, pay, directory)
    _check_resolved(session, case, pay)
    _check_not_approved(session, case, user)
    return policy, pay


def _check_token(session: Session, case: Case, token: tokens.ActionToken) -> None:
    """The button is unused, drawn for the case as it is now, and for its policy and currency."""
    used_by = session.connection().execute(_BY_NONCE, {"nonce": token.nonce}).scalar()
    if used_by is not None:
        if case.status in DECIDABLE:
            raise Refused(
                "already_decided",
                text("This button was already used by ", Person(used_by), "; use the latest card."),
            )
        raise Refused("already_decided", text("Already decided by ", Person(used_by), "."))
    if case.revision != token.revision or case.status not in DECIDABLE:
        raise Refused("stale", _stale_message(session, case))
    if token.policy_version != case.policy_version or token.currency != case.currency:
        raise Refused("token_mismatch", "This button does not match the case any more.")


def _check_not_approved(session: Session, case: Case, user: str) -> None:
    if user in _round_approvers(session, case):
        raise Refused("already_approved", "You already approved this case; another approver must.")


def _check_duties(session: Session, case: Case, user: str) -> None:
    """Segregation of duties: nobody decides a case they filed, nor the appeal of a case they
    filed or decided."""
    if case.requested_by and case.requested_by == user:
        raise Refused("own_request", "You filed this case, so someone else must decide it.")
    if case.appeal_of and user in first_deciders(session, case.appeal_of):
        raise Refused("first_decider", "You decided the appealed case; someone else must review.")
    appealed = session.get(Case, case.appeal_of) if case.appeal_of else None
    if appealed is not None and appealed.requested_by == user:
        raise Refused("own_request", "You filed the appealed case, so someone else must decide.")


def _authority_policy(session: Session, case: Case) -> LoadedPolicy:
    """Who may decide comes from the policy the case was decided under (else the active one)."""
    version = case.policy_version or control(session).active_version
    if version is None:
        raise Refused("no_policy", "No policy is published, so nobody may approve yet.")
    return load_version(session, version)


def _group(case: Case, policy: LoadedPolicy) -> str:
    if case.decision is None:  # never decided (older records): the strictest authority
        return str(strictest(policy)["approvers"])
    decided = case.decision.get("approvers")
    return str(decided or policy.doc.approvers_for(policy.doc.default))


@dataclass(frozen=True)
class Deciders:
    """Who may decide a case now (`deciders`): the one answer the click, the card, App Home and
    the API use."""

    group: str | None  # the approver group that may decide, by name; None: not the group
    approvers: ApproverGroup | None  # that group's people as the policy names them
    managers: Managers | None  # the managers, when they may decide
    escalated_by: str | None = None  # who handed the case to the managers, if a person did

    def includes(self, user: str, directory: Directory | None) -> bool:
        """Whether ``user`` is among them: named, or in a user group they name (now)."""
        return is_one_of(self.approvers, user, directory) or is_one_of(
            self.managers, user, directory
        )

    def who(self, besides: Collection[str] = ()) -> Text:
        """Everyone they name, each person and each user group once: the group's, then the
        managers'. ``besides``: people who may not act on this case (`may_not_act`), left
        out, and named after a user group they could be in: "@finance (not @Farah)"."""
        named = [
            id_
            for people in (self.approvers, self.managers)
            if people is not None
            for id_ in (*people.members, people.usergroup)
            if id_
        ]
        still = [Person(id_) for id_ in dict.fromkeys(named) if id_ not in besides]
        groups = any(people.usergroup for people in (self.approvers, self.managers) if people)
        if not groups or not besides:
            return join(" ", still)
        out = join(", ", [Person(u) for u in sorted(besides)])
        return text(join(" ", still), " (not ", out, ")")

    def to_json(self) -> dict[str, Any]:
        """For the API: the group (None once handed to the managers), whether the managers
        may decide, everyone named (user ids and user group ids), who escalated it."""
        return {
            "approvers": self.group,
            "managers": self.managers is not None,
            "people": [part.id for part in self.who() if isinstance(part, Person)],
            "escalated_by": self.escalated_by,
        }

    def refusal(self) -> str:
        """Why someone else may not decide, in a sentence."""
        if self.escalated_by is not None:
            return "This case was escalated to the managers: only they may decide it now."
        if self.managers is not None:
            return f"Only the {self.group} group or the managers may decide this case."
        return f"Only the {self.group} group may decide this case."


# Who escalated a case by a click: a person's escalation is an approval row of its own (the SLA
# job's is not), and hands the case to the managers for good. Run only on an escalated case.
_ESCALATED_BY = (
    select(_APPROVALS.c.approver)
    .where(_APPROVALS.c.case_id == bindparam("case_id"), _APPROVALS.c.decision == "escalate")
    .order_by(_APPROVALS.c.id)
    .limit(1)
)


def deciders(session: Session, case: Case, policy: LoadedPolicy) -> Deciders:
    """Who may decide ``case`` now under ``policy`` (the version the case was decided under):
    its group; its group and the managers once its deadline passed; the managers alone once a
    person escalated it."""
    group = _group(case, policy)
    approvers = policy.doc.approvers.get(group)
    managers = policy.doc.managers
    if case.escalation_level <= 0 or managers is None:
        return Deciders(group, approvers, None)
    person = session.connection().execute(_ESCALATED_BY, {"case_id": case.id}).scalar()
    if person is not None:
        return Deciders(None, None, managers, escalated_by=str(person))
    return Deciders(group, approvers, managers)


def may_not_act(session: Session, case: Case) -> set[str]:
    """People who may not decide ``case`` now whatever their role: whoever filed it (or the
    case it appeals), whoever decided the case it appeals, and whoever approved it in this
    round already (a tier-4 case waits for someone else)."""
    out = {case.requested_by} if case.requested_by else set()
    if case.appeal_of:
        out |= first_deciders(session, case.appeal_of)
        appealed = session.get(Case, case.appeal_of)
        if appealed is not None and appealed.requested_by:
            out.add(appealed.requested_by)
    return out | _round_approvers(session, case)


def waiting_for(session: Session, case: Case) -> Deciders | None:
    """Who may decide ``case`` now, if it waits for a person (None: it does not, or no policy
    is published)."""
    if case.status not in DECIDABLE:
        return None
    try:
        return deciders(session, case, _authority_policy(session, case))
    except Refused:
        return None


def _check_member(
    session: Session, case: Case, policy: LoadedPolicy, user: str, directory: Directory | None
) -> Deciders:
    now = deciders(session, case, policy)
    if not now.includes(user, directory):
        raise Refused("not_an_approver", now.refusal())
    return now


def _check_authority(
    session: Session,
    case: Case,
    policy: LoadedPolicy,
    user: str,
    amount: int,
    directory: Directory | None,
) -> None:
    now = _check_member(session, case, policy, user, directory)
    limit = _limit(now, policy, user, directory)
    currency = policy.doc.currency
    if case.currency.upper() == currency:
        within = amount <= limit
    elif case.currency.upper() in policy.doc.rates:
        rate = policy.doc.rates[case.currency.upper()]
        worth = money.to_major(amount, case.currency) * rate  # in the policy's currency
        within = worth <= money.to_major(limit, currency)
    else:
        raise Refused(
            "over_limit",
            f"Approval limits are in {currency} and this case is "
            f"{money.format_money(amount, case.currency)}; the policy names no {case.currency} "
            "rate to compare them, so nobody may approve it under this policy's limits.",
        )
    if not within:
        raise Refused(
            "over_limit",
            f"Your approval limit is {money.format_money(limit, currency)}; this case is "
            f"{money.format_money(amount, case.currency)}. Escalate it instead.",
        )


def _limit(now: Deciders, policy: LoadedPolicy, user: str, directory: Directory | None) -> int:
    """The highest limit ``user`` has among those who may decide now, in minor units of the
    policy's currency (they are among them: `_check_member` said so)."""
    limits = []
    if now.group is not None and is_one_of(now.approvers, user, directory):
        limits.append(approver_limit(policy.doc, now.group))
    if now.managers is not None and is_one_of(now.managers, user, directory):
        limits.append(money.to_minor(now.managers.limit, policy.doc.currency))
    return max(limits)


def may_decide(session: Session, case: Case, user: str, directory: Directory | None = None) -> bool:
    """Whether ``user`` could decide ``case`` now: the checks a click makes, without one (App
    Home shows nobody a case their click would be refused on)."""
    if case.status not in DECIDABLE:
        return False
    try:
        _check_duties(session, case, user)
        _check_member(session, case, _authority_policy(session, case), user, directory)
    except Refused:
        return False
    # a tier-4 approver who approved waits for the second one
    return user not in _round_approvers(session, case)


@dataclass(frozen=True)
class Preview:
    """What one person's click on one button will do, said before it does anything: from the
    checks the click itself makes (`_admit`), so it never promises what the click refuses."""

    case_id: str
    action: str
    case: Text  # the case in words (`case_words`)
    who: Text  # who clicks and why the case is theirs to decide
    effect: Text  # what the click does
    currency: str  # the case's
    ceiling: int | None = None  # a partial approval: at most this, in the case's currency


def preview(desk: Desk, *, token_value: str, user: str) -> Preview:
    """What ``user``'s click on this button would do (nothing decided, no token used); raises
    `ClickRefused` after recording the refusal, as the click itself would."""
    case_id: str | None = None
    try:
        token = tokens.verify(desk.secret, token_value, now=desk.now())
        case_id = token.case_id
        with desk.db.read() as session:
            case = session.get(Case, token.case_id)
            if case is None:
                raise Refused("stale", "This case does not exist any more.")
            return preview_in(session, case, token, user, desk.directory)
    except CaseError as exc:
        refusal = exc if isinstance(exc, Refused) else Refused(exc.code, exc.text)
    subject = _record_refusal(desk, case_id, user, refusal, claimed=_claimed_case(token_value))
    raise ClickRefused(refusal, subject)


def preview_in(
    session: Session,
    case: Case,
    token: tokens.ActionToken,
    user: str,
    directory: Directory | None,
) -> Preview:
    """`preview` in a session the caller holds (App Home asks it of every button it shows);
    raises `Refused`."""
    policy, pay = _admit(session, case, token, user, directory, amount=None, before_typing=True)
    now = deciders(session, case, policy)
    limit = _limit(now, policy, user, directory)
    ceiling = None
    if token.action == "escalate":
        effect = _escalation_effect(policy)
    elif token.action == "deny":
        effect = text("Denies it: nothing is paid, and the customer is told the reason you give.")
    elif pay is None:  # a partial approval: the amount comes next
        left = left_on_record(session, case.payment_id)
        ceiling = min(token.amount, left) if left is not None else token.amount
        effect = _partial_effect(session, case, ceiling, limit, policy)
    else:
        effect = _approval_effect(session, case, pay)
    who = text(
        "You (", Person(user), ") decide as ", why_yours(now, policy, user, limit, directory)
    )
    return Preview(case.id, token.action, case_words(case), who, effect, case.currency, ceiling)


def why_yours(
    now: Deciders, policy: LoadedPolicy, user: str, limit: int, directory: Directory | None
) -> Text:
    """Why a case is ``user``'s to decide, in words: their role among those who may decide
    now, their limit, and how the managers came in ("a manager, limit 10,000.00 USD: the
    deadline passed")."""
    shown = money.format_money(limit, policy.doc.currency)
    if now.group is not None and is_one_of(now.approvers, user, directory):
        return text(f"a {now.group} approver, limit {shown}")
    if now.escalated_by is not None:
        by = Person(now.escalated_by)
        return text(f"a manager, limit {shown}: escalated to the managers by ", by)
    return text(f"a manager, limit {shown}: the deadline passed")


def _approval_effect(session: Session, case: Case, pay: int) -> Text:
    """What an Approve click does now: one approval of two, a refund, or a parking."""
    approvals = len(_round_approvers(session, case)) + 1
    needed = approvals_needed(case)
    amount = money.format_money(pay, case.currency)
    if approvals < needed:
        return text(
            f"Approval {approvals} of {needed}: nothing is paid yet; another approver decides next."
        )
    left = left_on_record(session, case.payment_id)
    if left is not None and pay > left:
        return text(
            f"Only {money.format_money(left, case.currency)} is still refundable: {amount} will "
            "not be paid; the case will be parked for a person."
        )
    if control(session).paused:
        return text(
            f"Approves {amount}; execution is paused, so it is paid when a lead resumes it."
        )
    return text(f"Refunds {amount} now to the customer's payment.")


def _partial_effect(
    session: Session, case: Case, ceiling: int, limit: int, policy: LoadedPolicy
) -> Text:
    at_most = money.format_money(ceiling, case.currency)
    approvals = len(_round_approvers(session, case)) + 1
    needed = approvals_needed(case)
    if approvals < needed:
        said = (
            f"Approval {approvals} of {needed} of the amount you type (at most {at_most}): "
            "nothing is paid yet; another approver decides next."
        )
    else:
        said = f"Refunds the amount you type, at most {at_most}, to the customer's payment."
    if case.currency.upper() == policy.doc.currency and limit < ceiling:
        said += f" Your approval limit is {money.format_money(limit, policy.doc.currency)}."
    return text(said)


def _escalation_effect(policy: LoadedPolicy) -> Text:
    managers = policy.doc.managers
    ids = [*managers.members, *filter(None, [managers.usergroup])] if managers else []
    named = [Person(id_) for id_ in ids]
    return text(
        "Hands it to the managers (", join(" ", named), "): from then on only they decide it."
    )


def _check_resolved(session: Session, case: Case, pay: int | None) -> None:
    """Resolve before deciding: while a refund started for this case has no known outcome,
    nobody may deny it or approve another amount (the money may have left already)."""
    execution = session.connection().execute(_OPEN_EXECUTION, {"case_id": case.id}).first()
    if execution is None or pay == execution.amount:
        return  # approving the reserved amount again only resumes that same refund
    raise Refused(
        "execution_unresolved",
        f"A refund of {money.format_money(execution.amount, execution.currency)} was started "
        "for this case and the processor has not confirmed whether it was made; it is being "
        "looked up. Decide again once the case is updated.",
    )


def first_deciders(session: Session, case_id: str) -> set[str]:
    """People who approved or denied a case: none of them may decide its appeal."""
    return set(
        session.scalars(
            select(col(Approval.approver)).where(
                col(Approval.case_id) == case_id,
                col(Approval.decision).in_(["approve", "deny"]),
            )
        ).all()
    )


def may_vouch(session: Session, case: Case, user: str, directory: Directory | None = None) -> bool:
    """Whether `user` may mark the case's evidence checked: one of the approvers of the group
    the case was decided for, or a manager; never its requester."""
    if case.requested_by == user:
        return False
    try:
        policy = _authority_policy(session, case)
    except Refused:
        return False
    group = policy.doc.approvers.get(_group(case, policy))
    # Only the group that decides this case: vouching changes what its re-checks see.
    return is_one_of(group, user, directory) or is_one_of(policy.doc.managers, user, directory)


def _partial_amount(
    amount: str | None, token: tokens.ActionToken, case: Case, left: int | None
) -> int:
    """The amount a person typed: positive, at most the case's, at most what is still left."""
    if amount is None:
        raise Refused("invalid_amount", "Enter the amount to refund.")
    try:
        minor = money.to_minor(amount, case.currency)
    except ValueError as exc:
        raise Refused("invalid_amount", str(exc)) from None
    if minor <= 0:
        raise Refused("invalid_amount", "The amount must be more than zero.")
    if minor > token.amount:
        raise Refused(
            "invalid_amount",
            f"At most {money.format_money(token.amount, case.currency)} can be refunded.",
        )
    if left is not None and minor > left:
        raise Refused(
            "invalid_amount",
            f"At most {money.format_money(left, case.currency)} can be refunded: that is what "
            "is still refundable on this payment.",
        )
    return minor


@dataclass(frozen=True)
class _Click:
    """A person's click on a verified token, in its transaction, the case locked."""

    desk: Desk
    session: Session
    case: Case
    token: tokens.ActionToken
    user: str

    def record(self, decision: str, amount: int | None, reason: str | None) -> None:
        # The nonce is consumed here: a concurrent click fails on the unique key.
        self.session.connection().execute(
            _ADD_APPROVAL,
            {
                "case_id": self.case.id,
                "round": self.case.approval_round,
                "approver": self.user,
                "decision": decision,
                "amount": amount,
                "reason": reason,
                "token_nonce": self.token.nonce,
                "created_at": clock.now(),
            },
        )


def _round_approvers(session: Session, case: Case) -> set[str]:
    round_ = {"case_id": case.id, "round": case.approval_round}
    return set(session.connection().execute(_ROUND_APPROVERS, round_).scalars())


def _approve(click: _Click, amount: int, reason: str | None) -> Outcome:
    desk, session, case, user = click.desk, click.session, click.case, click.user
    actor = Actor("human", user)
    approvers = _round_approvers(session, case)
    click.record("approve", amount, reason)
    # A typed amount, or the model's reading the approver saw marked as such, is now theirs.
    if amount != case.amount or case.amount_source == Provenance.model_inference:
        set_amount(session, desk.audit, case, amount, Provenance.human_entry, actor=actor)
    needed = approvals_needed(case)
    if len(approvers) + 1 < needed:
        new_revision(session, case)
        on_record(
            session,
            desk.audit,
            case,
            "approval.recorded",
            actor,
            {"approvals": len(approvers) + 1, "needed": needed, "amount": amount},
        )
        job = notify(session, event="case.approval_recorded", case_id=case.id, user=user)
        return Outcome(case.id, f"Approval recorded ({len(approvers) + 1} of {needed}).", [job])
    move(
        session,
        desk.audit,
        case,
        Status.approved,
        actor=actor,
        action="case.approved",
        payload={"basis": "approval", "approvers": sorted(approvers | {user}), "amount": amount},
    )
    job = enqueue_execution(session, case, desk.now())
    return Outcome(case.id, "Approved: the refund is on its way.", [job])


def _deny(click: _Click, reason: str | None) -> Outcome:
    desk, session, case = click.desk, click.session, click.case
    click.record("deny", None, reason)
    case.customer_message = (reason or "").strip() or DEFAULT_DENIAL
    move(
        session,
        desk.audit,
        case,
        Status.denied,
        actor=Actor("human", click.user),
        action="case.denied",
        payload={"basis": "approval", "has_reason": bool(reason)},
    )
    return Outcome(case.id, "Denied; the customer will be told.")


def _check_escalation(
    session: Session, case: Case, policy: LoadedPolicy, user: str, directory: Directory | None
) -> None:
    """Up to the managers, once: they are the top of the chain, and nobody escalates to
    themselves."""
    _check_member(session, case, policy, user, directory)
    managers = policy.doc.managers
    if managers is None:
        raise Refused("no_managers", "The policy names no managers to escalate to.")
    if case.escalation_level >= 1:
        raise Refused(
            "top_of_chain",
            "The case is already with the managers, the top of the chain: decide it here.",
        )
    if managers.usergroup is None and set(managers.members) <= {user}:
        raise Refused(
            "escalate_to_self",
            "You are the only manager, so escalating would send it back to you: decide it here.",
        )


def _escalate(click: _Click, reason: str | None) -> Outcome:
    desk, session, case, user = click.desk, click.session, click.case, click.user
    reason = (reason or "").strip() or None
    click.record("escalate", None, reason)
    case.escalation_level += 1
    new_revision(session, case)
    on_record(
        session,
        desk.audit,
        case,
        "case.escalated",
        Actor("human", user),
        {"level": case.escalation_level, "has_reason": reason is not None},
    )
    job = notify(
        session,
        event="case.escalated",
        case_id=case.id,
        level=case.escalation_level,
        user=user,
        reason=reason,
    )
    return Outcome(case.id, "Escalated to the managers.", [job])


def _stale_message(session: Session, case: Case) -> Text:
    last = session.scalars(
        select(Approval)
        .where(col(Approval.case_id) == case.id)
        .order_by(col(Approval.created_at).desc())
        .limit(1)
    ).first()
    if case.status not in DECIDABLE and last is not None:
        return text("Already decided by ", Person(last.approver), ".")
    return text("This card is out of date; use the latest card in the thread.")


def _already_decided(desk: Desk, case_id: str | None) -> Text:
    if case_id is None:
        return text("Already decided.")
    with desk.db.read() as session:
        case = session.get(Case, case_id)
        return _stale_message(session, case) if case else text("Already decided.")


def _claimed_case(token_value: str) -> str | None:
    """The case an unverifiable token names: kept on the refusal record, never trusted."""
    body = token_value.partition(".")[0]
    try:
        value = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        return str(value.get("case_id"))[:40] if isinstance(value, dict) else None
    except ValueError:
        return None


INPUT_ERRORS = frozenset({"invalid_amount"})  # a typo in a modal: shown on the field, no record


def _record_refusal(
    desk: Desk, case_id: str | None, user: str, refusal: CaseError, *, claimed: str | None
) -> Text | None:
    """A refused decision is on the record (who tried what); a mistyped amount is not one.
    Returns the refused case in words (None: the button named none that can be trusted)."""
    if refusal.code in INPUT_ERRORS:
        return None
    with desk.db.write() as session:
        case = session.get(Case, case_id) if case_id else None
        subject = case_words(case) if case else None
        desk.audit.append(
            session,
            action="approval.refused",
            actor=Actor("human", user),
            case_id=case.id if case else None,
            correlation_id=case.correlation_id if case else None,
            policy_version=case.policy_version if case else None,
            payload={
                "code": refusal.code,
                "reason": refusal.message,
                **({} if case else {"claimed_case_id": claimed}),
            },
        )
    return subject


def case_words(case: Case) -> Text:
    """A case as a person tells it apart: "Case `case_1` (600.00 USD, damaged)"."""
    reason = (case.reason or "unknown reason").replace("_", " ")
    return text(
        "Case ", Code(case.id), f" ({money.format_money(case.amount, case.currency)}, {reason})"
    )
