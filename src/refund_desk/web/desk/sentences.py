"""Audit records as sentences an auditor reads: "Lina Haddad approved 75.00 USD under v1, rule
default, tier 3". Plain text (the template escapes it); people by name where one is known, by
their Slack id otherwise. An action without a sentence of its own reads as who did what."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from refund_desk import money
from refund_desk.bot.blocks.cards import likelihood
from refund_desk.governance.versions import LoadedPolicy
from refund_desk.storage.models import AuditRecord, Case


def _w(value: Any) -> str:
    return str(value).replace("_", " ")


class Sentences:
    def __init__(self, case: Case, policy: LoadedPolicy | None, names: Mapping[str, str]) -> None:
        self.case = case
        self.policy = policy
        self.names = names

    def person(self, user: str | None) -> str:
        if not user:
            return "someone"
        return self.names.get(user, user)

    def money(self, minor: Any, currency: Any = None) -> str:
        if not isinstance(minor, int) or isinstance(minor, bool):
            return "an unknown amount"
        return money.format_money(minor, str(currency or self.case.currency))

    def actor(self, r: AuditRecord) -> str:
        if r.actor_kind == "human":
            return self.person(r.actor_id)
        if r.actor_kind == "policy":
            return f"The policy (v{r.policy_version})" if r.policy_version else "The policy"
        if r.actor_kind == "model":
            return "The advisor"
        if r.actor_kind == "system":
            return "Refund Desk"
        if r.actor_kind == "api":
            return f"The API key {r.actor_id}" if r.actor_id else "The API"
        return f"{r.actor_kind} {r.actor_id}" if r.actor_id else r.actor_kind

    def under(self, r: AuditRecord, rule: Any = None, tier: Any = None) -> str:
        """ "under v1, rule default, tier 3" from the record and the case's decision."""
        decision = self.case.decision or {}
        rule = rule if rule is not None else decision.get("rule")
        tier = tier if tier is not None else decision.get("tier")
        parts = [f"v{r.policy_version}" if r.policy_version else "no published policy"]
        if rule:
            parts.append(f"rule {rule}")
        if tier is not None:
            parts.append(f"tier {tier}")
        return "under " + ", ".join(parts)

    def of(self, r: AuditRecord) -> str:
        said = _SAY.get(r.action) or _transition
        text = said(self, r, r.payload or {})
        if text is None:
            text = f"{self.actor(r)}: {_w(r.action)}"
        return text if text.endswith(".") else text + "."


def _received(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    asked = s.money(p.get("amount"), p.get("currency"))
    by = s.actor(r) if r.actor_kind != "api" else f"The API key {r.actor_id}"
    verified = "the payer on record" if p.get("customer_verified") else "not the payer on record"
    return (
        f"{by} filed a request for {asked} on payment {p.get('payment')} through "
        f"{_w(p.get('source'))} (amount: {_w(p.get('amount_source'))}; customer {verified})"
    )


def _advised(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    confidence = p.get("confidence")
    band = f", {likelihood(float(confidence))}" if confidence is not None else ""
    line = (
        f"The advisor ({p.get('provider') or 'offline'}) read the reason as "
        f"{_w(p.get('reason'))}{band}"
    )
    if p.get("injection_suspected"):
        line += "; it suspected the message tries to instruct the system (treated as data)"
    if p.get("fallback"):
        line += "; the model failed and this is the offline advisor's reading"
    return line


def _advisor_failed(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"The advisor failed ({p.get('error')}); the policy decided without advice"


def _decided(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    d = p.get("decision") or {}
    rule = d.get("rule")
    fired = ", ".join(d.get("guardrails") or [])
    line = (
        f"Policy v{r.policy_version} decided {_w(d.get('outcome'))} by rule {rule}, "
        f"tier {d.get('tier')}"
    )
    if d.get("approvers") and d.get("outcome") == "review":
        line += f", for {_w(d['approvers'])}"
    if fired:
        line += f" (guardrails: {fired})"
    return line


def _awaiting(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    if p.get("note"):
        return f"The case went back to a person: {p['note']}"
    group = p.get("approvers") or (s.case.decision or {}).get("approvers")
    whom = _w(group) if group else "a person"
    return f"The case waits for {whom} {s.under(r, p.get('rule'), p.get('tier'))}"


def _approved(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    if p.get("basis") == "policy":
        return (
            f"Policy v{r.policy_version} approved {s.money(s.case.amount)} by itself "
            f"{s.under(r, p.get('rule'))}"
        )
    people = p.get("approvers") or ([r.actor_id] if r.actor_id else [])
    who = " and ".join(s.person(u) for u in people)
    return f"{who} approved {s.money(p.get('amount'))} {s.under(r)}"


def _approval_recorded(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return (
        f"{s.actor(r)} approved {s.money(p.get('amount'))} {s.under(r)}: approval "
        f"{p.get('approvals')} of {p.get('needed')}, nothing paid yet"
    )


def _denied(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    if r.actor_kind == "human":
        note = " with a reason for the customer" if p.get("has_reason") else ""
        return f"{s.actor(r)} denied the refund {s.under(r)}{note}"
    return f"Policy v{r.policy_version} denied the refund {s.under(r, p.get('rule'))}"


def _answered(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    rules = ", ".join(p.get("cited_rules") or [])
    return f"The policy answered the customer's question from its own words (rules {rules})"


def _escalated(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    if p.get("basis") == "sla":
        return f"The deadline passed: escalated to level {p.get('level')} (the managers)"
    note = " with a note" if p.get("has_reason") else ""
    return f"{s.actor(r)} escalated the case to the managers{note}"


def _reminder(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"Reminder sent in the thread: the decision is due {p.get('due') or 'soon'}"


def _parked(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    why_ = p.get("reason") or (f"the processor answered {p['code']}" if p.get("code") else None)
    return f"{s.actor(r)} parked the case for a person" + (f": {why_}" if why_ else "")


def _policy_error(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"The policy could not be evaluated ({p.get('error')}); the case waits for a person"


def _reserved(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    how = "automatic" if p.get("automatic") else "approved by a person"
    return (
        f"Refund Desk reserved {s.money(p.get('amount'), p.get('currency'))} for execution "
        f"{p.get('execution_id')} ({how})"
    )


def _succeeded(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return (
        f"The processor refunded {s.money(p.get('amount'), p.get('currency'))}: refund "
        f"{p.get('refund_id')} (execution {p.get('execution_id')})"
    )


def _failed(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"The processor refused execution {p.get('execution_id')}: {p.get('code')}"


def _refused_exec(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"The refund was not sent: {_w(p.get('code'))}"


def _reversed(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"The processor reversed the refund ({_w(p.get('code'))})"


def _told(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    channel = p.get("channel") or "none"
    kind = _w(p.get("kind"))
    if channel == "none":
        return f"The customer's {kind} message was recorded on the case (no channel to send it)"
    link = " with an appeal link" if p.get("appeal_link") else ""
    done = "sent" if p.get("delivered") else "recorded"
    return f"The customer's {kind} message was {done} by {channel}{link}"


def _undeliverable(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"The customer could not be reached by {p.get('channel')}: {p.get('error', '')}"


def _refusal(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"{s.actor(r)}'s click was refused ({_w(p.get('code'))}): {p.get('reason')}"


def _amount_changed(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return (
        f"{s.actor(r)} changed the amount from {s.money(p.get('from'))} to "
        f"{s.money(p.get('to'))} ({_w(p.get('source'))})"
    )


def _amount_confirmed(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"{s.actor(r)} confirmed the amount {s.money(p.get('amount'))} ({_w(p.get('source'))})"


def _duplicate(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"Possible duplicate of case {p.get('duplicate_of')}: a person decides"


def _evidence(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    files, links = len(p.get("files") or []), int(p.get("links") or 0)
    return f"{s.actor(r)} attached evidence: {files} file(s), {links} link(s)"


def _checked(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"{s.actor(r)} checked evidence {p.get('evidence_id')}: now a verified document"


def _erased(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return "The customer's personal data was erased; the record stays"


def _finding(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str:
    return f"Reconciliation found {_w(p.get('kind'))}: {p.get('detail', '')}".rstrip(": ")


def _transition(s: Sentences, r: AuditRecord, p: dict[str, Any]) -> str | None:
    to = p.get("to")
    if r.action == "case.refunded":
        return "The case is refunded"
    if r.action == "case.failed":
        return "The refund failed"
    return f"{s.actor(r)} moved the case from {_w(p.get('from'))} to {_w(to)}" if to else None


_Say = Callable[[Sentences, AuditRecord, dict[str, Any]], "str | None"]
_SAY: dict[str, _Say] = {
    "request.received": _received,
    "advisor.advised": _advised,
    "advisor.failed": _advisor_failed,
    "policy.decided": _decided,
    "case.awaiting_approval": _awaiting,
    "case.approved": _approved,
    "approval.recorded": _approval_recorded,
    "case.denied": _denied,
    "case.answered": _answered,
    "case.escalated": _escalated,
    "sla.reminder": _reminder,
    "case.parked": _parked,
    "policy.error": _policy_error,
    "execution.reserved": _reserved,
    "execution.succeeded": _succeeded,
    "execution.failed": _failed,
    "execution.refused": _refused_exec,
    "execution.reversed": _reversed,
    "customer.told": _told,
    "customer.undeliverable": _undeliverable,
    "approval.refused": _refusal,
    "case.amount_changed": _amount_changed,
    "case.amount_confirmed": _amount_confirmed,
    "request.possible_duplicate": _duplicate,
    "evidence.attached": _evidence,
    "evidence.checked": _checked,
    "customer.erased": _erased,
    "reconcile.finding": _finding,
    "case.refunded": _transition,
    "case.failed": _transition,
    "case.executing": _transition,
}
