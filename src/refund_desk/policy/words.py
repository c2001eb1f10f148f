"""The policy in words a lead reads: rules by their description, people and channels by
name, amounts in the policy's currency, what the prover found as requests and examples.

Pure: every function takes a document (or a report) and returns a ``Text``. People and
channels are ``Person`` parts (Slack shows each by name; a channel id is linked as a channel),
never the raw ids in a sentence. A rule's expression is kept for a details line
(``details``), never the only thing said about it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from refund_desk import money
from refund_desk.policy.schema import Decides, People, PolicyDocument, Rule
from refund_desk.text import Code, Person, Text, join, lines, text

if TYPE_CHECKING:
    from refund_desk.policy.authority import Setting
    from refund_desk.policy.prove import Region, Side

OUTCOME_DONE = {
    "approve": "paid automatically",
    "deny": "denied",
    "review": "decided by a person",
    "inform": "answered (no money)",
}
"""What happens to a request, as a past participle: "paid automatically"."""

GUARDRAILS = {
    "possible-duplicate": "another open case or a recent refund of this amount exists",
    "unverified-customer": "the requester is not proven to be the payer",
    "model-amount": "only the AI advisor produced the amount",
    "suspected-injection": "the message tries to instruct the system",
    "low-confidence": "the AI advisor is not confident enough of its reading",
    "unknown-amount": "the amount or what is left to refund is unknown",
    "currency-mismatch": "the currency is not the payment's or the policy's",
    "exceeds-refundable": "more than is left to refund",
}
"""The hard limits no policy lifts, in words (``guardrail:<name>`` decisions)."""

_SLACK_ID = re.compile(r"^[UWSCG](?=[A-Z]*[0-9])[A-Z0-9]{2,}$")
"""A Slack id: a person (U, W), a user group (S), a channel (C, G), with a digit (not "USD")."""


# --------------------------------------------------------------------- names


def named(value: str) -> Person | str:
    """A Slack id (a person, a user group, a channel) as a part Slack shows by name."""
    return Person(value) if _SLACK_ID.match(value) else value


def people(who: Iterable[str]) -> Text:
    """ "@Lee, @Sam": everyone named, by name; "nobody" for no one."""
    parts = [named(w) for w in who]
    return join(", ", parts) if parts else text("nobody")


def everyone(group: People | None) -> Text:
    if group is None:
        return text("nobody")
    return people([*group.members, *([group.usergroup] if group.usergroup else [])])


def amount(value: Decimal, currency: str) -> str:
    """A policy amount (major units) as people read money: "200.00 USD"."""
    return money.format_money(money.to_minor(value, currency), currency)


def group_name(group: str) -> str:
    """``support-leads`` -> "support leads"."""
    return group.replace("-", " ").replace("_", " ")


def group(doc: PolicyDocument, name: str | None, *, with_people: bool = False) -> Text:
    """ "finance (up to 5000.00 USD)", or with its people: "finance (@Lina, @Maya, up to …)"."""
    if name is None:
        return text("nobody")
    found = doc.approvers.get(name)
    if found is None:
        if name == "managers" and doc.managers is not None:
            found_limit, who, where = doc.managers.limit, everyone(doc.managers), None
        else:
            return text(group_name(name))
    else:
        found_limit, who, where = found.limit, everyone(found), found.channel
    limit = f"up to {amount(found_limit, doc.currency)}"
    if with_people:
        channel = text(" in ", named(where)) if where else text()
        return text(group_name(name), " (", who, f", {limit}", channel, ")")
    return text(group_name(name), f" ({limit})")


def rule_name(doc: PolicyDocument | None, rule_id: str) -> Text:
    """A deciding rule as people know it: its description with its id beside it, "the
    default (no rule matched)", or a guardrail's meaning."""
    if rule_id.startswith("guardrail:"):
        name = rule_id.removeprefix("guardrail:")
        return text("a hard limit (", GUARDRAILS.get(name, name), ")")
    if rule_id == "default":
        said = doc.default.description if doc is not None else None
        return text("the default (", said or "no rule matched", ")")
    if rule_id in ("error", "policy-error"):
        return text("an error reading the case")
    if rule_id == "no-policy":
        return text("no published policy")
    try:
        return rule_title(doc.rule(rule_id)) if doc is not None else text(Code(rule_id))
    except KeyError:
        return text(Code(rule_id))


def rule_title(rule: Rule, *, quoted: bool = True) -> Text:
    """“Its description” (`its-id`), or the id alone for a rule without a description."""
    if not rule.description:
        return text(Code(rule.id))
    said = f"“{rule.description}”" if quoted else rule.description
    return text(said, " (", Code(rule.id), ")")


def decides(doc: PolicyDocument, rule: Decides) -> Text:
    """What a rule (or the default) does: "paid automatically (tier 2)", "denied", "decided by
    finance (up to 5000.00 USD), tier 4"."""
    if rule.outcome == "review":
        who = group(doc, doc.approvers_for(rule))
        return text("decided by ", who, f", tier {rule.tier}")
    if rule.outcome == "approve":
        return text(f"paid automatically (tier {rule.tier})")
    return text(OUTCOME_DONE[rule.outcome])


def details(rule: Rule) -> Text:
    """The rule's expression, for the details line under what it means."""
    return text("details: ", Code(rule.id), " when ", Code(rule.when))


# --------------------------------------------------------------------- a whole document


def policy_words(doc: PolicyDocument) -> Text:
    """The policy as a lead reads it: each rule in order with what it does and its details
    line, the default, who approves how much, the leads, operators, viewers and channels."""
    rules = [
        lines(
            text(f"{n}. ", rule_title(r, quoted=False), ": ", decides(doc, r), "."),
            text("    ", details(r)),
        )
        for n, r in enumerate(doc.rules, 1)
    ]
    default = doc.default.description
    groups = [group(doc, name, with_people=True) for name in doc.approvers]
    out = [
        text("The first rule that matches a request decides:"),
        *rules,
        text(
            "Otherwise",
            f" ({default})" if default else "",
            ": ",
            decides(doc, doc.default),
            ".",
        ),
        text("Approvers: ", join("; ", groups), "."),
    ]
    if doc.managers is not None:
        limit = amount(doc.managers.limit, doc.currency)
        out.append(text("Managers (escalations): ", everyone(doc.managers), f", up to {limit}."))
    out.append(text("Leads (change the policy): ", people(doc.leads), "."))
    if doc.operators is not None:
        out.append(text("Operators (read cases): ", everyone(doc.operators), "."))
    if doc.viewers is not None:
        out.append(text("Viewers (read everything, decide nothing): ", everyone(doc.viewers), "."))
    if doc.channels:
        shown = [text(f"{use} ", named(where)) for use, where in doc.channels.items()]
        out.append(text("Channels: ", join(", ", shown), "."))
    return lines(*out)


# --------------------------------------------------------------------- facts in words

_FACTS: dict[str, tuple[str, str]] = {
    # fact -> (how a bound reads, with {b} for the bound; how an example value reads, {v});
    # the yes-or-no facts read as _YES_NO says
    "request.amount": ("amount {b}", "{v}"),
    "request.currency": ("in {b}", "in {v}"),
    "request.reason": ("reason {b}", "{v}"),
    "request.source": ("filed through {b}", "filed through {v}"),
    "request.amount_source": ("amount from {b}", "amount from {v}"),
    "request.reason_source": ("reason from {b}", "reason from {v}"),
    "order.amount": ("paid {b}", "paid {v}"),
    "order.refunded": ("already refunded {b}", "{v} already refunded"),
    "order.refundable": ("left to refund {b}", "{v} left to refund"),
    "order.currency": ("paid in {b}", "paid in {v}"),
    "order.age_days": ("order {b} days old", "{v} days old"),
    "customer.chargebacks_365d": ("{b} chargebacks in a year", "{v} chargebacks in a year"),
    "customer.refunds_90d": ("{b} refunds in 90 days", "{v} refunds in 90 days"),
    "customer.open_cases": ("{b} other open cases", "{v} other open cases"),
    "advisor.confidence": ("AI confidence {b}", "AI confidence {v}"),
    "evidence.count": ("{b} files attached", "{v} files attached"),
    "evidence.checked": ("{b} files checked", "{v} files checked"),
}
_YES_NO: dict[str, tuple[str, str]] = {
    "request.possible_duplicate": ("a possible duplicate", "not a possible duplicate"),
    "customer.verified": ("the customer verified", "the customer not verified"),
    "advisor.injection_suspected": ("a suspected prompt injection", "no suspected injection"),
}
_INTS = {"order.age_days", "customer.chargebacks_365d", "customer.refunds_90d"}
_INTS |= {"customer.open_cases", "evidence.count", "evidence.checked"}
_OPS = {"≤": "up to {x}", "<": "under {x}", "≥": "{x} or more", ">": "over {x}", "=": "{x}"}


def bound_words(fact: str, bound: str) -> str:
    """One of the prover's bounds ("from 50.01 USD to 80.00 USD", "≤ 30", "one of damaged",
    "true", "> 0 or null") as a phrase: "amount 50.01 to 80.00 USD", "order up to 30 days
    old", "reason damaged", "1 or more chargebacks in a year"."""
    unknown = bound.endswith(" or null")
    core = bound.removesuffix(" or null")
    if core == "null (unknown)":
        return f"{_noun(fact)} unknown"
    if fact in _YES_NO:
        yes, no = _YES_NO[fact]
        said = {"true": yes, "false": no}.get(core, f"{_noun(fact)} {core}")
    else:
        value = "known" if core == "known (not null)" else _value_words(fact, core)
        said = _FACTS.get(fact, (fact + " {b}", ""))[0].format(b=value)
    return f"{said} (or unknown)" if unknown else said


def _noun(fact: str) -> str:
    return fact.split(".", 1)[1].replace("_", " ")


def _value_words(fact: str, core: str) -> str:
    if core.startswith("one of "):
        return " or ".join(_reason(v) for v in core.removeprefix("one of ").split(", "))
    if core.startswith("anything but "):
        return "anything but " + " or ".join(core.removeprefix("anything but ").split(", "))
    between = re.fullmatch(r"(from|above) (.+?) (to|below) (.+)", core)
    if between:
        low, high = between[2], between[4]
        low, high = _same_currency(low, high)
        left = "over " if between[1] == "above" else ""
        right = " to " if between[3] == "to" else ", under "
        return f"{left}{low}{right}{high}"
    op = re.fullmatch(r"([≤<≥>=]) (.+)", core)
    if op is None:
        return core
    sign, value = op[1], op[2]
    if fact in _INTS and sign in "<>" and value.lstrip("-").isdigit():
        step = 1 if sign == ">" else -1
        sign, value = ("≥" if sign == ">" else "≤"), str(int(value) + step)
    if sign == "≤" and value == "0":
        return "0"
    return _OPS[sign].format(x=value)


def _same_currency(low: str, high: str) -> tuple[str, str]:
    """ "50.01 USD", "80.00 USD" -> "50.01", "80.00 USD": one currency, said once."""
    a, b = low.rsplit(" ", 1), high.rsplit(" ", 1)
    if len(a) == 2 and len(b) == 2 and a[1] == b[1] and a[1].isalpha():
        return a[0], high
    return low, high


def _reason(value: str) -> str:
    return value.replace("_", " ")


def example_words(fact: str, value: Any, currency: str) -> str | None:
    """One fact of an example request: "64.00 USD", "damaged", "12 days old"."""
    if value is None:
        return None
    if fact in _YES_NO:
        return _YES_NO[fact][0 if value else 1]
    if fact in ("request.amount", "order.amount", "order.refunded", "order.refundable"):
        shown = money.format_money(int(value), currency)
    elif fact == "request.reason":
        shown = _reason(str(value))
    else:
        shown = str(value)
    return _FACTS.get(fact, (fact, fact + " {v}"))[1].format(v=shown)


def example(witness: Mapping[str, Mapping[str, Any]], facts: Iterable[str], currency: str) -> str:
    """The facts of one example request that matter, in words: "50.01 USD, damaged, 0 days
    old". Money reads in its section's currency (the policy's where it is unknown)."""
    out: list[str] = []
    for fact in facts:
        section, name = fact.split(".", 1)
        fields = witness.get(section) or {}
        cur = fields.get("currency") or currency
        said = example_words(fact, fields.get(name), cur)
        if said:
            out.append(said)
    return ", ".join(out)


# --------------------------------------------------------------------- what the prover found

KIND_WORDS = {
    "pays-automatically": "Pays automatically",
    "person-instead-of-deny": "A person decides instead of a denial",
    "looser-review": "A looser review",
    "denies": "Denied",
    "person-instead-of-automatic": "A person decides instead of an automatic payment",
    "stricter-review": "A stricter review",
    "tier-changed": "Paid automatically at another tier",
}
"""Each kind of region (``prove.KINDS``) as the head of a line about it."""


def side_words(doc: PolicyDocument | None, side: Side, *, by: bool = True) -> Text:
    """How one version decides a region: "paid automatically by “…” (`damaged-small`)",
    "support leads (up to 500.00 USD), tier 3, by the default (no rule matched)"."""
    if side.outcome == "review":
        limit = f" (up to {side.limit})" if side.limit else ""
        who = group_name(side.approvers) if side.approvers else "a person"
        said = text(f"{who}{limit}, tier {side.tier}")
    else:
        said = text(OUTCOME_DONE.get(side.outcome, side.outcome))
    joint = ", by " if side.outcome == "review" else " by "
    return text(said, joint, deciding(doc, side)) if by else said


def deciding(doc: PolicyDocument | None, side: Side) -> Text:
    """The rule (or guardrail) that decides a side of a region, by name."""
    rule, _, after = side.path.partition(" -> ")
    rule = rule.removesuffix(" (cannot evaluate)")
    return rule_name(doc, after if after.startswith("guardrail:") else rule)


def regions_words(
    regions: Iterable[Region], old: PolicyDocument | None, new: PolicyDocument | None
) -> list[Text]:
    """One line per way the versions differ: regions whose two verdicts are the same (a
    raised limit shows up under every rule that sends cases to that group) share a line."""
    alike: dict[tuple[Any, ...], list[Region]] = {}
    for region in regions:
        key = (region.kind, replace(region.old, path=""), replace(region.new, path=""))
        alike.setdefault(key, []).append(region)
    currency = new.currency if new is not None else old.currency if old is not None else "USD"
    return [_region_line(group, old, new, currency) for group in alike.values()]


def _region_line(
    regions: list[Region], old: PolicyDocument | None, new: PolicyDocument | None, currency: str
) -> Text:
    """ "Pays automatically: amount 50.01 to 80.00 USD, reason damaged — e.g. 50.01 USD,
    damaged (was: support leads …; now: paid automatically by …)"."""
    first = regions[0]
    shown = example(first.witness, _example_facts(first), currency)
    checked = "" if first.confirmed else " (an example the engine did not confirm)"
    if len(regions) == 1:
        where = [bound_words(b.fact, b.text) for b in first.bounds if _said(b.text)]
        which = ", ".join(where) or "requests of every kind"
        return text(
            KIND_WORDS.get(first.kind, first.kind),
            f": {which} — e.g. {shown}{checked} (was: ",
            side_words(old, first.old),
            "; now: ",
            side_words(new, first.new),
            ")",
        )
    rules = join(", ", _distinct(deciding(new, r.new) for r in regions))
    return text(
        KIND_WORDS.get(first.kind, first.kind),
        f": {len(regions)} kinds of request (by ",
        rules,
        f") — e.g. {shown}{checked} (was: ",
        side_words(old, first.old, by=False),
        "; now: ",
        side_words(new, first.new, by=False),
        ")",
    )


def _said(bound: str) -> bool:
    """Whether a bound tells a person anything ("known (not null)" does not)."""
    return bound != "known (not null)"


def _example_facts(region: Region) -> list[str]:
    facts = [b.fact for b in region.bounds]
    return facts if "request.amount" in facts else ["request.amount", *facts]


def _distinct(items: Iterable[Text]) -> list[Text]:
    return list(dict.fromkeys(items))


_SETTING_NAMES = {
    "currency": "the currency",
    "leads": "leads",
    "review_sample_rate": "share of automatic refunds re-checked",
    "breaker.max_refunds_per_hour": "most automatic refunds an hour",
    "breaker.max_amount_per_hour": "most paid automatically an hour",
    "breaker.max_failures_in_row": "processor failures in a row before the breaker trips",
}


def setting_name(path: str) -> str:
    """``approvers.finance.limit`` -> "finance's limit"; a path it does not know, as is."""
    if path in _SETTING_NAMES:
        return _SETTING_NAMES[path]
    parts = path.split(".")
    if parts[0] == "approvers" and len(parts) >= 2:
        who = group_name(parts[1])
        tail = {"members": f"{who} approvers", "usergroup": f"{who}'s user group"}
        return tail.get(parts[-1], f"{who}'s {parts[-1]}") if len(parts) > 2 else f"group {who}"
    if parts[0] in ("managers", "operators", "viewers") and len(parts) == 2:
        tail = {"members": parts[0], "usergroup": f"{parts[0]}' user group"}
        return tail.get(parts[1], f"{parts[0]}' {parts[1]}")
    if parts[0] == "rates" and len(parts) == 2:
        return f"the rate for {parts[1]}"
    return path


def setting_words(setting: Setting) -> Text:
    """A changed setting of the proof: people added and removed by name, a limit from and to:
    "leads: added @Sam", "finance's limit: 5000 USD → 8000 USD (looser)"."""
    looser = " (looser)" if setting.permissive else ""
    before, after = _ids(setting.old), _ids(setting.new)
    if before is not None and after is not None:
        added = [x for x in after if x not in before]
        removed = [x for x in before if x not in after]
        said = [
            *([text("added ", people(added))] if added else []),
            *([text("removed ", people(removed))] if removed else []),
        ]
        return text(setting_name(setting.name), ": ", join("; ", said), looser)
    return text(
        f"{setting_name(setting.name)}: ",
        mentioning(setting.old),
        " → ",
        mentioning(setting.new),
        looser,
    )


def mentioning(shown: str) -> Text:
    """A plain value with every Slack id in it (one with a digit: not "USD") as a part Slack
    shows by name."""
    pieces = re.split(r"\b([UWSCG](?=[A-Z]*[0-9])[A-Z0-9]{2,})\b", shown)
    return text(*[named(p) if i % 2 else p for i, p in enumerate(pieces)])


def _ids(shown: str) -> list[str] | None:
    """ "U0A, S0B" (or "none") as ids, if that is what the setting lists."""
    if shown == "none":
        return []
    items = shown.split(", ")
    return items if all(_SLACK_ID.match(i) for i in items) else None
