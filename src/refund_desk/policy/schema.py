"""The policy document: pydantic models with every field checked, unknown keys refused.

The models check what one field can check on its own. ``parse_policy`` adds the checks
that need the whole document (rule references, compiled expressions, known facts) and runs
them on the raw YAML too, so *all* problems are reported at once, even when some fields are
already broken.
"""

from __future__ import annotations

import hashlib
import json
from datetime import time
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
import zen
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from refund_desk import money
from refund_desk.policy.context import (
    FACTS,
    given_to_context,
    neutral_context,
    referenced_names,
    to_zen,
    zen_error,
)
from refund_desk.policy.durations import parse_duration
from refund_desk.policy.errors import ContextInvalid, PolicyInvalid, Problem

Outcome = Literal["approve", "deny", "review"]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

DEFAULT_TIER: dict[str, int] = {"approve": 2, "review": 3, "deny": 1}
"""Tier when a rule names none. A deny moves no money: tier 1, informational."""

MAX_DESCRIPTION = 200
SLUG = r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$"
USER_ID = r"^[UW][A-Z0-9]{2,}$"
USERGROUP_ID = r"^S[A-Z0-9]{2,}$"
CHANNEL_ID = r"^[CG][A-Z0-9]{2,}$"

Slug = Annotated[str, Field(pattern=SLUG)]
UserId = Annotated[str, Field(pattern=USER_ID)]
UsergroupId = Annotated[str, Field(pattern=USERGROUP_ID)]
# A lead is a person, or a Slack user group whose members are all leads.
LeadId = Annotated[str, Field(pattern=r"^(?:[UW]|S)[A-Z0-9]{2,}$")]
ChannelId = Annotated[str, Field(pattern=CHANNEL_ID)]
Share = Annotated[float, Field(ge=0, le=1)]


def _major_amount(value: Any) -> Any:
    """Policy amounts are major units; read them exactly (a YAML float via its repr)."""
    if isinstance(value, bool):
        raise ValueError("must be an amount, not true/false")
    if isinstance(value, float):
        value = repr(value)
    if isinstance(value, int | str | Decimal):
        try:
            dec = Decimal(str(value).strip()) if not isinstance(value, Decimal) else value
        except InvalidOperation:
            raise ValueError(f"must be an amount in major units, got {value!r}") from None
        if not dec.is_finite() or dec < 0:
            raise ValueError(f"must be a non-negative amount, got {value!r}")
        if dec >= money.MAX_MINOR:  # in any currency, more than can be stored or compared
            raise ValueError(f"is too large, got {value!r}")
        # one spelling per value, so 500, 500.0 and "500.00" hash alike
        return dec.quantize(Decimal(1)) if dec == dec.to_integral_value() else dec.normalize()
    raise ValueError(f"must be an amount in major units, got {value!r}")


MajorAmount = Annotated[Decimal, BeforeValidator(_major_amount)]


def _duration(text: str) -> str:
    parse_duration(text)
    return text


def _hhmm(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError('must be "HH:MM" in quotes (YAML reads unquoted 17:00 as a number)')
    if not isinstance(value, str) or len(value) != 5:
        raise ValueError(f'must be "HH:MM", got {value!r}')
    try:
        time.fromisoformat(value)
    except ValueError:
        raise ValueError(f'must be "HH:MM", got {value!r}') from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Decides(_Strict):
    """What a rule (or the default) decides: outcome, risk tier, who approves, what to say."""

    outcome: Outcome
    tier: int = Field(ge=1, le=4)
    approvers: Slug | None = None
    say: str | None = None
    # What the rule is for, in a lead's words: chat shows it where it names the rule (a
    # backtest, a diff, a proof, `/refund-policy show`), the expression a details line away.
    description: str | None = Field(default=None, min_length=1, max_length=MAX_DESCRIPTION)

    @model_validator(mode="before")
    @classmethod
    def _default_tier(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tier") is None:
            outcome = data.get("outcome")
            tier = DEFAULT_TIER.get(outcome, 3) if isinstance(outcome, str) else 3
            data = {**data, "tier": tier}
        return data


class Rule(Decides):
    """A rule: when ``when`` holds (and no earlier rule did), its outcome decides."""

    id: Slug
    when: str = Field(min_length=1)


class DefaultRule(Decides):
    """What happens when no rule holds."""


class People(_Strict):
    """People the policy names: Slack user ids (``members``), a Slack user group
    (``usergroup: S0123ABCD``, whose members are read from Slack's directory each time they
    act), or both. The policy keeps the group; the people come from the directory."""

    members: list[UserId] = Field(default_factory=list)
    usergroup: UsergroupId | None = None

    @model_validator(mode="after")
    def _someone(self) -> People:
        if not self.members and self.usergroup is None:
            raise ValueError("name `members`, a `usergroup`, or both")
        return self


class ApproverGroup(People):
    """People who may approve, each up to ``limit`` (major units), optionally in a channel."""

    limit: MajorAmount
    channel: ChannelId | None = None


class Managers(People):
    """Who receives SLA escalations and may approve escalated cases up to ``limit``."""

    limit: MajorAmount


def _leads(value: Any) -> Any:
    """``leads: [U…, S…]``, or ``leads: {members: [U…], usergroup: S…}`` (the same list)."""
    if isinstance(value, dict):
        people = People.model_validate(value)
        return [*people.members, *([people.usergroup] if people.usergroup else [])]
    return value


class BusinessHours(_Strict):
    """When SLA clocks run and reminders go out."""

    tz: str
    days: list[Weekday] = Field(min_length=1)
    start: Annotated[str, BeforeValidator(_hhmm)]
    end: Annotated[str, BeforeValidator(_hhmm)]

    @field_validator("tz")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @model_validator(mode="after")
    def _order(self) -> BusinessHours:
        if self.start >= self.end:
            raise ValueError(f"start {self.start} must be before end {self.end}")
        if len(set(self.days)) != len(self.days):
            raise ValueError("days repeat")
        return self


class AdvisorSettings(_Strict):
    """How far the AI advisor's reading is trusted."""

    min_confidence: Share | None = None


class Breaker(_Strict):
    """Circuit breaker on automatic refunds: any limit reached pauses execution."""

    max_failures_in_row: int | None = Field(default=None, ge=1)
    max_refunds_per_hour: int | None = Field(default=None, ge=1)
    max_amount_per_hour: MajorAmount | None = None


class Expect(_Strict):
    """What an embedded test expects; ``rule`` and ``tier`` are checked only when given."""

    outcome: Outcome
    rule: str | None = None
    tier: int | None = Field(default=None, ge=1, le=4)


class PolicyTest(_Strict):
    """An embedded example: ``given`` facts (major units) laid over the neutral context."""

    name: str = Field(min_length=1)
    given: dict[str, Any] = Field(default_factory=dict)
    expect: Expect


class PolicyDocument(_Strict):
    """A whole policy as published. Amounts are major units of ``currency``."""

    policy: Slug
    currency: str
    rules: list[Rule]
    default: DefaultRule
    approvers: dict[Slug, ApproverGroup] = Field(min_length=1)
    managers: Managers | None = None
    leads: Annotated[list[LeadId], BeforeValidator(_leads)] = Field(default_factory=list)
    # Who may read case details, the policy, counterfactuals and history besides the leads,
    # approvers and managers (support agents who file cases).
    operators: People | None = None
    # Who reads everything and decides nothing (finance, auditors): the desk, case details,
    # the policy and history, never a decision, a filing or a change of the policy.
    viewers: People | None = None
    channels: dict[str, ChannelId] = Field(default_factory=dict)
    sla: dict[Annotated[int, Field(ge=1, le=4)], Annotated[str, AfterValidator(_duration)]] = Field(
        default_factory=dict
    )
    reminder_at: float | None = Field(default=None, gt=0, lt=1)
    business_hours: BusinessHours | None = None
    advisor: AdvisorSettings = Field(default_factory=AdvisorSettings)
    breaker: Breaker = Field(default_factory=Breaker)
    review_sample_rate: Share = 0.0
    # What one unit of another currency is worth in the policy's currency, for comparing a
    # case in that currency with approval limits: {USD: 150} in a JPY policy. Without a rate,
    # a case in another currency cannot be approved under this policy's limits.
    rates: dict[str, Annotated[Decimal, Field(gt=0)]] = Field(default_factory=dict)
    tests: list[PolicyTest] = Field(default_factory=list)

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str) -> str:
        money.exponent(value)
        return value.upper()

    @field_validator("rates")
    @classmethod
    def _rates(cls, value: dict[str, Decimal]) -> dict[str, Decimal]:
        for code in value:
            money.exponent(code)
        return {code.upper(): rate for code, rate in value.items()}

    def rule(self, rule_id: str) -> Rule:
        """The rule with ``rule_id``; KeyError if none."""
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def approvers_for(self, decides: Decides) -> str:
        """The group a case decided by ``decides`` goes to when a person must look.

        Its own group, else the default's, else (only reachable for a deny rule that could
        not be evaluated) the first group of the policy: a review never goes to nobody.
        """
        return decides.approvers or self.default.approvers or next(iter(self.approvers))


def group_members(doc: PolicyDocument, group: str) -> tuple[str, ...]:
    """Who a group names, as the prover compares it: its user ids, then its user group."""
    people = doc.approvers.get(group)
    if people is None:
        return ()
    named = tuple(sorted(people.members))
    return named + ((f"usergroup:{people.usergroup}",) if people.usergroup else ())


def usergroups(doc: PolicyDocument) -> set[str]:
    """Every Slack user group the policy names (approver groups, managers, leads, operators,
    viewers)."""
    people = [*doc.approvers.values(), doc.managers, doc.operators, doc.viewers]
    named = {p.usergroup for p in people if p is not None and p.usergroup}
    return named | {lead for lead in doc.leads if lead.startswith("S")}


def approver_limit(doc: PolicyDocument, group: str) -> int:
    """The approval limit of ``group`` in minor units of the policy currency.

    ``"managers"`` names the managers unless an approver group has that name.
    """
    if group in doc.approvers:
        limit = doc.approvers[group].limit
    elif group == "managers" and doc.managers is not None:
        limit = doc.managers.limit
    else:
        raise KeyError(f"unknown approver group {group!r}")
    return money.to_minor(limit, doc.currency)


# --- parsing: YAML -> PolicyDocument, every problem collected -------------------------------

_LIST_FIELDS = frozenset({"rules", "tests", "members", "leads", "days"})


class _Loader(yaml.SafeLoader):
    """SafeLoader that records duplicate keys instead of silently keeping the last one."""

    duplicates: list[str]


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str | int):
            continue
        if key in seen:
            loader.duplicates.append(f"line {key_node.start_mark.line + 1}: key {key!r}")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str) -> tuple[Any, list[Problem]]:
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # its reader refuses control characters at once
        loader.duplicates = []
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        return None, [Problem(None, "", f"not valid YAML: {exc}")]
    finally:
        if loader is not None:
            loader.dispose()
    return data, [Problem(None, "", f"duplicate {d}") for d in loader.duplicates]


def _path(parts: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    prev: Any = None
    for part in parts:
        if isinstance(part, int) and prev in _LIST_FIELDS:
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
        prev = part
    return out


def _locate(raw: dict[str, Any], loc: tuple[Any, ...]) -> tuple[str | None, str]:
    """pydantic loc -> (rule id or None, path inside the rule or the document)."""
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        rules = raw.get("rules")
        item = rules[loc[1]] if isinstance(rules, list) and loc[1] < len(rules) else None
        rule_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(rule_id, str) and rule_id:
            return rule_id, _path(loc[2:])
        return None, _path(loc)
    if len(loc) > 1 and loc[0] == "default":
        return "default", _path(loc[1:])
    return None, _path(loc)


def _pydantic_problems(raw: dict[str, Any], exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        rule, path = _locate(raw, loc)
        if err["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}"
            path = _locate(raw, loc[:-1])[1] if rule is None or len(loc) > 3 else ""
        elif err["type"] == "missing":
            message = "required"
        else:
            message = err["msg"].removeprefix("Value error, ")
        problems.append(Problem(rule, path, message))
    return problems


def _check_when(expression: str, currency: str | None) -> list[str]:
    """Compile ``expression`` in zen, check its facts and try it on the neutral context."""
    error = zen.validate_expression(expression)
    if error:
        return [f"does not compile: {error['source']}"]
    unknown = [n for n in referenced_names(expression) if n not in FACTS]
    if unknown:
        return [f"unknown fact {name!r}" for name in unknown]
    cur = currency or "USD"
    try:
        result = zen.compile_expression(expression).evaluate(to_zen(neutral_context(cur), cur))
    except RuntimeError as exc:
        return [f"cannot evaluate on the neutral test context: {zen_error(exc)}"]
    if not isinstance(result, bool):
        return [f"is not a condition: it gives {result!r}, not true or false"]
    return []


def _check_decides(
    data: dict[str, Any], groups: dict[str, Any] | None, default_group: Any
) -> list[tuple[str, str]]:
    """Approver references of a rule or the default -> [(field, message)]."""
    outcome = data.get("outcome")
    tier = data.get("tier")
    if tier is None and isinstance(outcome, str):
        tier = DEFAULT_TIER.get(outcome)
    group = data.get("approvers")
    out: list[tuple[str, str]] = []
    if isinstance(group, str) and groups is not None and group not in groups:
        known = ", ".join(sorted(str(g) for g in groups)) or "none"
        out.append(("approvers", f"unknown approver group {group!r} (groups: {known})"))
    if group is None:
        if tier == 4:
            out.append(("approvers", "a tier-4 rule must name its approvers"))
        elif outcome == "review" and default_group is None:
            out.append(("approvers", "a review needs approvers: name a group here or on default"))
        elif outcome == "approve" and default_group is None:
            hint = "no approvers here or on default: a guardrail may send this to a person"
            out.append(("approvers", hint))
    return out


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _check_rules(raw: dict[str, Any], currency: str | None) -> list[Problem]:
    groups = raw["approvers"] if isinstance(raw.get("approvers"), dict) else None
    default = _dict(raw.get("default"))
    default_group = default.get("approvers")
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    rules = _list(raw.get("rules"))
    for i, item in enumerate(rules):
        if not isinstance(item, dict):
            continue
        rule_id = item.get("id") if isinstance(item.get("id"), str) else None
        prefix = "" if rule_id else f"rules[{i}]."
        if rule_id in seen:
            problems.append(
                Problem(rule_id, "id", f"duplicate rule id (also rules[{seen[rule_id]}])")
            )
        elif rule_id == "default":
            problems.append(Problem(rule_id, "id", "'default' is reserved for the default"))
        if rule_id:
            seen.setdefault(rule_id, i)
        when = item.get("when")
        if isinstance(when, str) and when.strip():
            problems += [Problem(rule_id, prefix + "when", m) for m in _check_when(when, currency)]
        for field, message in _check_decides(item, groups, default_group):
            problems.append(Problem(rule_id, prefix + field, message))
    for field, message in _check_decides(default, groups, default_group):
        problems.append(Problem("default", field, message))
    return problems


def _check_amounts(raw: dict[str, Any], currency: str | None) -> list[Problem]:
    places: list[tuple[str, Any]] = []
    groups = raw.get("approvers")
    if isinstance(groups, dict):
        places += [
            (f"approvers.{name}.limit", g.get("limit"))
            for name, g in groups.items()
            if isinstance(g, dict)
        ]
    for section, field in (("managers", "limit"), ("breaker", "max_amount_per_hour")):
        if isinstance(raw.get(section), dict):
            places.append((f"{section}.{field}", raw[section].get(field)))
    problems = []
    for path, value in places:
        try:
            if value is not None and currency is not None:
                money.to_minor(str(_major_amount(value)), currency)
        except ValueError as exc:
            problems.append(Problem(None, path, str(exc)))
    return problems


def _check_tests(raw: dict[str, Any], currency: str | None) -> list[Problem]:
    tests = _list(raw.get("tests"))
    rules = _list(raw.get("rules"))
    ids = {r.get("id") for r in rules if isinstance(r, dict)} | {"default"}
    problems: list[Problem] = []
    names: set[str] = set()
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            continue
        name = test.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(Problem(None, f"tests[{i}].name", f"duplicate test {name!r}"))
            names.add(name)
        given = test.get("given")
        if isinstance(given, dict) and currency:
            try:
                given_to_context(given, currency)
            except ContextInvalid as exc:
                problems += [Problem(None, f"tests[{i}].given", m) for m in exc.problems]
        expect = test.get("expect")
        rule = expect.get("rule") if isinstance(expect, dict) else None
        if isinstance(rule, str) and rule not in ids and not rule.startswith("guardrail:"):
            problems.append(Problem(None, f"tests[{i}].expect.rule", f"no rule {rule!r}"))
    return problems


def parse_policy(text: str) -> PolicyDocument:
    """YAML text -> a valid ``PolicyDocument``, or ``PolicyInvalid`` with every problem."""
    raw, problems = _load_yaml(text)
    if raw is None and problems:
        raise PolicyInvalid(problems)
    if not isinstance(raw, dict):
        raise PolicyInvalid([*problems, Problem(None, "", "a policy must be a YAML mapping")])
    doc: PolicyDocument | None = None
    try:
        doc = PolicyDocument.model_validate(raw)
    except ValidationError as exc:
        problems += _pydantic_problems(raw, exc)
    cur = raw.get("currency")
    currency = cur.upper() if isinstance(cur, str) and cur.upper() in money.CURRENCIES else None
    problems += _check_rules(raw, currency)
    problems += _check_amounts(raw, currency)
    problems += _check_tests(raw, currency)
    if problems or doc is None:
        raise PolicyInvalid(problems)
    return doc


def policy_hash(text_or_doc: str | PolicyDocument) -> str:
    """sha256 hex of the canonical JSON of the parsed document: formatting does not count.

    A rule without a ``description`` hashes as it did before descriptions existed, and a
    policy without ``viewers`` as before viewers existed, so the texts published then keep
    their hashes (and their backtests)."""
    doc = parse_policy(text_or_doc) if isinstance(text_or_doc, str) else text_or_doc
    data = doc.model_dump(mode="json")
    if data.get("viewers") is None:
        data.pop("viewers", None)
    for decides in [*data["rules"], data["default"]]:
        if decides.get("description") is None:
            decides.pop("description", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
