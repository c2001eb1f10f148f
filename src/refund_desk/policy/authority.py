"""Settings outside the rules that widen who may pay, or how much: the proof's other half.

The rules say what happens to a request (``prove.py`` proves every difference); these
settings say who may act on it and against which limits: the approver groups (members, user
group, limit), the managers, the ``rates`` that turn another currency into the policy's, the
``leads`` who change the policy, the ``operators`` who read it, the breaker and the review
sample. A change is *permissive* when it lets someone new act, raises a limit, makes an
amount in another currency look smaller (a lower rate, or a rate where there was none), or
loosens a brake. Narrowing changes are listed too, as not permissive. The ``viewers`` read
and decide nothing: a change of them is listed, never permissive (it widens who may read, not
who may pay).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal

from refund_desk.policy.schema import People, PolicyDocument


@dataclass(frozen=True)
class Setting:
    """A changed setting outside the rules that changes who may pay how much."""

    name: str
    old: str
    new: str
    permissive: bool


def changed_settings(old: PolicyDocument, new: PolicyDocument) -> list[Setting]:
    """Every setting that differs, in a stable order, each judged permissive or not."""
    out: list[Setting] = []
    if old.currency != new.currency:
        out.append(Setting("currency", old.currency, new.currency, True))
    out += _approver_groups(old, new)
    out += _managers(old, new)
    out += _people("operators", old.operators, new.operators)
    out += _reading_only("viewers", old.viewers, new.viewers)
    out += _names("leads", old.leads, new.leads)
    out += _rates(old, new)
    out += _brakes(old, new)
    return out


def _amount(value: Decimal | None, currency: str) -> str:
    return "none" if value is None else f"{value} {currency}"


def _limit(name: str, old: Decimal | None, new: Decimal | None, currency: str) -> list[Setting]:
    """A limit: raised (or new where there was none) is permissive."""
    if old == new:
        return []
    looser = new is not None and (old is None or new > old)
    return [Setting(name, _amount(old, currency), _amount(new, currency), looser)]


def _names(name: str, old: Iterable[str], new: Iterable[str]) -> list[Setting]:
    """A set of people (user ids, user groups): anyone added is permissive."""
    before, after = sorted(set(old)), sorted(set(new))
    if before == after:
        return []
    shown = [", ".join(names) or "none" for names in (before, after)]
    return [Setting(name, shown[0], shown[1], bool(set(after) - set(before)))]


def _people(name: str, old: People | None, new: People | None) -> list[Setting]:
    """Members and user group of a named set of people (absent: nobody)."""
    members = _names(f"{name}.members", old.members if old else (), new.members if new else ())
    return members + _names(f"{name}.usergroup", _usergroup(old), _usergroup(new))


def _reading_only(name: str, old: People | None, new: People | None) -> list[Setting]:
    """People who read and decide nothing: shown, never a loosening of who may pay."""
    return [replace(s, permissive=False) for s in _people(name, old, new)]


def _usergroup(people: People | None) -> list[str]:
    return [people.usergroup] if people is not None and people.usergroup else []


def _who(people: People, limit: Decimal, currency: str) -> str:
    named = [*people.members, *_usergroup(people)]
    return f"{', '.join(named)} up to {_amount(limit, currency)}"


def _approver_groups(old: PolicyDocument, new: PolicyDocument) -> list[Setting]:
    """Each approver group: a new group or a new member, a new user group or a higher limit
    lets someone approve who could not, or more; a removed group narrows."""
    out: list[Setting] = []
    for group in sorted(old.approvers.keys() | new.approvers.keys()):
        a, b = old.approvers.get(group), new.approvers.get(group)
        where = f"approvers.{group}"
        if a is None or b is None:
            shown = ["none" if g is None else _who(g, g.limit, new.currency) for g in (a, b)]
            out.append(Setting(where, shown[0], shown[1], a is None))
            continue
        out += _people(where, a, b)
        out += _limit(f"{where}.limit", a.limit, b.limit, new.currency)
    return out


def _managers(old: PolicyDocument, new: PolicyDocument) -> list[Setting]:
    """The managers approve escalated cases up to their limit."""
    a, b = old.managers, new.managers
    out = _people("managers", a, b)
    limits = (a.limit if a else None, b.limit if b else None)
    return out + _limit("managers.limit", *limits, new.currency)


def _rates(old: PolicyDocument, new: PolicyDocument) -> list[Setting]:
    """``rates[X]`` is what one X is worth in the policy's currency; an approval compares
    ``amount * rate`` with the limits, so a lower rate (or a rate where there was none, which
    made nobody able to approve) lets more money out."""
    out: list[Setting] = []
    for code in sorted(old.rates.keys() | new.rates.keys()):
        a, b = old.rates.get(code), new.rates.get(code)
        if a == b:
            continue
        looser = b is not None and (a is None or b < a)
        shown = ["none" if r is None else str(r) for r in (a, b)]
        out.append(Setting(f"rates.{code}", shown[0], shown[1], looser))
    return out


def _brakes(old: PolicyDocument, new: PolicyDocument) -> list[Setting]:
    """The breaker's limits (none: no limit) and the share of refunds reviewed afterwards."""
    out: list[Setting] = []
    for key in ("max_refunds_per_hour", "max_amount_per_hour", "max_failures_in_row"):
        x, y = getattr(old.breaker, key), getattr(new.breaker, key)
        if x != y:
            looser = y is None or (x is not None and y > x)
            out.append(Setting(f"breaker.{key}", str(x), str(y), looser))
    a, b = old.review_sample_rate, new.review_sample_rate
    if a != b:
        out.append(Setting("review_sample_rate", str(a), str(b), b < a))
    return out
