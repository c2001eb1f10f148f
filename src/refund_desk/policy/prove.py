"""Which requests would a new policy version decide differently from the old one? Proved.

``prove(old, new)`` translates both versions (rules, default, guardrails; see ``smt.py``)
into z3 terms over the typed facts and enumerates *every* region where the verdicts differ:
one region per pair of decision paths (old path, new path) whose conjunction is
satisfiable. Each region comes with the bounds per fact the solver can prove, and one
concrete witness context that is evaluated with the real engine before it is reported.

Regions come most important first (``KINDS``). Settings outside the rules that say who may
act and against which limits (approver groups, managers, ``rates``, ``leads``, ``operators``,
breaker, review sample) are compared by ``authority.py``; ``viewers`` decide nothing, so a change
of them is listed and never looser. ``ProofReport.more_permissive`` is
true when any region or setting loosens, or when the analysis could not finish.

An expression outside the translated subset does not make the answer "no differences":
that rule becomes a free choice (holds, fails, or cannot be evaluated), which covers what
the real expression does on every context, so a "nowhere more permissive" stays sound; the
report names the rule and the construct, and witnesses the engine does not confirm are
marked.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path as FilePath
from typing import Any

import z3

from refund_desk import money
from refund_desk.policy.authority import Setting, changed_settings
from refund_desk.policy.context import (
    AMOUNT_SOURCES,
    FACTS,
    MAX_EXACT_MINOR,
    MONEY_FACTS,
    PROVENANCES,
)
from refund_desk.policy.engine import CompiledPolicy, Decision
from refund_desk.policy.errors import PolicyError
from refund_desk.policy.schema import PolicyDocument, group_members, parse_policy, policy_hash
from refund_desk.policy.smt import (
    GUARDRAIL_FACTS,
    GUARDRAIL_READS,
    KNOWN_SOURCES,
    OUTCOME_CODE,
    Encoded,
    Universe,
    Unsupported,
    Verdict,
    describe_number,
    encode_policy,
    number_literals,
    rule_trees,
    string_literals,
)

FORMAT = "refund-desk/policy-prove/1"

KINDS: dict[str, tuple[bool, str]] = {
    "pays-automatically": (True, "NEW pays automatically where OLD did not"),
    "person-instead-of-deny": (True, "NEW asks a person where OLD denied"),
    "looser-review": (True, "NEW's review can pay more (lower tier, higher limit, someone new)"),
    "denies": (False, "NEW denies what OLD paid or asked a person about"),
    "person-instead-of-automatic": (False, "NEW asks a person where OLD paid automatically"),
    "stricter-review": (
        False,
        "NEW's review is no looser (higher tier, lower limit, fewer people, or a group renamed)",
    ),
    "tier-changed": (False, "both pay automatically, at another tier"),
}
"""kind -> (more permissive?, meaning), in order of importance."""

EXIT_NOWHERE, EXIT_ERROR, EXIT_SOMEWHERE = 0, 2, 3
CHECK_TIMEOUT_MS = 20_000
_LOCK = threading.Lock()


class ProveError(PolicyError):
    """The prover could not run (unreadable input); distinct from 'could not finish'."""


@dataclass(frozen=True)
class Side:
    """How one version decides the requests of a region."""

    path: str
    outcome: str
    tier: int
    approvers: str | None
    limit: str | None

    def text(self) -> str:
        if self.outcome == "review":
            return (
                f"review (tier {self.tier}) by {self.approvers}, limit {self.limit}"
                f" — via {self.path}"
            )
        return f"{self.outcome} (tier {self.tier}) — via {self.path}"


@dataclass(frozen=True)
class Bound:
    """What a fact can be inside a region (only facts narrower than their whole range)."""

    fact: str
    text: str


@dataclass(frozen=True)
class Region:
    """Requests on which the two versions differ the same way, with one checked example."""

    kind: str
    old: Side
    new: Side
    bounds: tuple[Bound, ...]
    witness: dict[str, Any]
    given: dict[str, Any]
    confirmed: bool
    """The engine, evaluating ``witness``, gives exactly these two paths."""

    @property
    def permissive(self) -> bool:
        return KINDS[self.kind][0]


@dataclass(frozen=True)
class Partial:
    """A rule the translation could not read, treated as a free choice."""

    version: str
    rule: str
    construct: str


@dataclass(frozen=True)
class ProofReport:
    """Everything the prover found; ``to_json``/``render`` for people and the audit record."""

    old_policy: str
    old_hash: str
    new_policy: str
    new_hash: str
    regions: tuple[Region, ...]
    partial: tuple[Partial, ...]
    settings: tuple[Setting, ...]
    finished: bool
    """False if the solver gave up somewhere: then nothing is claimed to be absent."""
    seconds: float = field(default=0.0, compare=False)
    checks: int = field(default=0, compare=False)

    @property
    def complete(self) -> bool:
        """Every rule was translated and the solver finished: regions are exact."""
        return self.finished and not self.partial

    @property
    def more_permissive(self) -> bool:
        """NEW is somewhere more permissive than OLD (or the proof could not rule it out)."""
        return (
            not self.finished
            or any(r.permissive for r in self.regions)
            or any(s.permissive for s in self.settings)
        )

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of the report: what the publish audit record keeps."""
        return _canonical_hash(_body(self))


# --- loading ---------------------------------------------------------------------------------


def load_policy(source: PolicyDocument | str) -> PolicyDocument:
    """A document, YAML text, or a path to a YAML file -> a validated document."""
    if isinstance(source, PolicyDocument):
        return source
    text = source
    if "\n" not in source and source.strip():
        candidate = FilePath(source.strip())
        try:
            if candidate.is_file():
                text = candidate.read_text(encoding="utf-8")
            elif candidate.suffix in (".yaml", ".yml"):
                raise ProveError(f"no such file: {source}")
        except OSError as exc:
            raise ProveError(f"cannot read {source}: {exc}") from None
    return parse_policy(text)


# --- proving ---------------------------------------------------------------------------------


def _verdict_terms(
    enc: Encoded, tag: str, groups: dict[tuple[Any, ...], int]
) -> tuple[z3.ArithRef, list[z3.BoolRef], dict[str, z3.ArithRef]]:
    """A path-index variable for ``enc``, its defining constraints, and verdict terms."""
    k = z3.Int(f"path_{tag}")
    terms = {n: z3.Int(f"{n}_{tag}") for n in ("outcome", "tier", "limit", "group")}
    out: list[z3.BoolRef] = [k >= 0, k < len(enc.paths)]
    for i, path in enumerate(enc.paths):
        v = path.verdict
        gid = groups.setdefault((v.group, v.members, v.currency), len(groups)) if v.group else -1
        out.append((k == i) == path.cond)
        out.append(
            z3.Implies(
                k == i,
                z3.And(
                    terms["outcome"] == OUTCOME_CODE[v.outcome],
                    terms["tier"] == v.tier,
                    terms["limit"] == (v.limit if v.limit is not None else -1),
                    terms["group"] == gid,
                ),
            )
        )
    return k, out, terms


def classify(old: Verdict, new: Verdict) -> str | None:
    """The kind of difference between two verdicts (``None``: they decide alike)."""
    if old.outcome != new.outcome:
        if new.outcome == "approve":
            return "pays-automatically"
        if new.outcome == "deny":
            return "denies"
        return "person-instead-of-deny" if old.outcome == "deny" else "person-instead-of-automatic"
    if new.outcome == "review":
        old_group = (old.group, old.members, old.currency)
        new_group = (new.group, new.members, new.currency)
        if (old.tier, old.limit, old_group) == (new.tier, new.limit, new_group):
            return None
        # Another group is looser unless its people are among the old group's (same user
        # group or none, no new member): fewer people, a lower limit, a higher tier narrow.
        fewer = new.currency == old.currency and set(new.members) <= set(old.members)
        if new.tier < old.tier or (new.limit or 0) > (old.limit or 0) or not fewer:
            return "looser-review"
        return "stricter-review"
    if new.outcome == "approve" and new.tier != old.tier:
        return "tier-changed"
    return None


def _differ(a: dict[str, z3.ArithRef], b: dict[str, z3.ArithRef]) -> z3.BoolRef:
    review = z3.And(a["outcome"] == 1, b["outcome"] == 1)
    approve = z3.And(a["outcome"] == 2, b["outcome"] == 2)
    return z3.Or(
        a["outcome"] != b["outcome"],
        z3.And(
            review,
            z3.Or(a["tier"] != b["tier"], a["limit"] != b["limit"], a["group"] != b["group"]),
        ),
        z3.And(approve, a["tier"] != b["tier"]),
    )


def prove(
    old: PolicyDocument | str, new: PolicyDocument | str, *, describe: bool = True
) -> ProofReport:
    """Every region where ``new`` decides differently from ``old``, most important first.

    ``describe=False`` skips the per-fact bounds (regions, witnesses and engine checks stay).
    Each proof runs in a fresh z3 context, so the same pair always gives the same report.
    """
    with _LOCK:
        saved = z3.z3._main_ctx
        z3.z3._main_ctx = z3.Context()
        try:
            return _prove(old, new, describe=describe)
        finally:
            z3.z3._main_ctx = saved


def _prove(old: PolicyDocument | str, new: PolicyDocument | str, *, describe: bool) -> ProofReport:
    started = time.perf_counter()
    old_doc, new_doc = load_policy(old), load_policy(new)
    old_trees, new_trees = rule_trees(old_doc), rule_trees(new_doc)
    literals: set[str] = set()
    numbers = {Decimal(0), Decimal(1)}  # where a bound can lie: the literals rules compare with
    for doc in (old_doc, new_doc):
        if doc.advisor.min_confidence is not None:
            numbers.add(Decimal(repr(doc.advisor.min_confidence)))
    for tree in (*old_trees.values(), *new_trees.values()):
        if isinstance(tree, tuple):
            literals |= string_literals(tree)
            numbers |= {abs(n) for n in number_literals(tree)}
            numbers |= {-abs(n) for n in number_literals(tree)}
    uni = Universe.build([old_doc, new_doc], literals)
    enc_old = encode_policy(old_doc, uni, old_trees)
    enc_new = encode_policy(new_doc, uni, new_trees)
    groups: dict[tuple[Any, ...], int] = {}
    k_old, def_old, t_old = _verdict_terms(enc_old, "old", groups)
    k_new, def_new, t_new = _verdict_terms(enc_new, "new", groups)

    solver = z3.Solver()
    solver.set("timeout", CHECK_TIMEOUT_MS)
    solver.add(*uni.constraints, *def_old, *def_new, _differ(t_old, t_new))
    ctx = _Run(solver, uni, enc_old, enc_new, literals, numbers, describe)
    regions: list[Region] = []
    finished = True
    while True:
        result = ctx.check()
        if result == z3.unknown:
            finished = False
            break
        if result == z3.unsat:
            break
        model = solver.model()
        i = model.eval(k_old, model_completion=True).as_long()
        j = model.eval(k_new, model_completion=True).as_long()
        solver.push()
        solver.add(k_old == i, k_new == j)
        region = ctx.region(enc_old.paths[i], enc_new.paths[j], model)
        solver.pop()
        if region is not None:
            regions.append(region)
        solver.add(z3.Not(z3.And(k_old == i, k_new == j)))
    regions.sort(key=_importance)
    partial = [Partial("old", o.rule, o.construct) for o in enc_old.opaque]
    partial += [Partial("new", o.rule, o.construct) for o in enc_new.opaque]
    return ProofReport(
        old_policy=old_doc.policy,
        old_hash=policy_hash(old_doc),
        new_policy=new_doc.policy,
        new_hash=policy_hash(new_doc),
        regions=tuple(regions),
        partial=tuple(partial),
        settings=tuple(changed_settings(old_doc, new_doc)),
        finished=finished,
        seconds=time.perf_counter() - started,
        checks=ctx.checks,
    )


def _importance(region: Region) -> tuple[Any, ...]:
    """Kind first (``KINDS`` order), then the decision paths: stable, description-free."""
    return (list(KINDS).index(region.kind), region.old.path, region.new.path)


class _Run:
    """Solver calls of one proof: witnesses, bounds and engine checks per region."""

    def __init__(
        self,
        solver: z3.Solver,
        uni: Universe,
        old: Encoded,
        new: Encoded,
        literals: set[str],
        numbers: set[Decimal],
        describe: bool,
    ) -> None:
        self.literals = literals
        self.numbers = numbers
        self.describe = describe
        before = {(r.id, r.when) for r in old.doc.rules}
        after = {(r.id, r.when) for r in new.doc.rules}
        self.changed_facts: set[str] = set()
        for rule_id, _ in before ^ after:  # rules added, removed or rewritten
            for enc in (old, new):
                self.changed_facts |= enc.rule_facts.get(rule_id, set())
        self.solver = solver
        self.uni = uni
        self.old = old
        self.new = new
        self.engines = (CompiledPolicy.compile(old.doc), CompiledPolicy.compile(new.doc))
        self.checks = 0
        self.nice = self._nice_groups()

    def check(self, *assumptions: Any) -> Any:
        self.checks += 1
        return self.solver.check(*assumptions)

    def _nice_groups(self) -> list[z3.BoolRef]:
        """Assumption literals that make a witness look like a real request, when possible."""
        uni, v, null = self.uni, self.uni.value, self.uni.null
        groups: list[list[Any]] = []
        ranges = []
        for name, (kind, _) in FACTS.items():
            if kind == "int":
                ranges.append(z3.And(v[name] >= 0, v[name] <= 1000))
            elif kind == "money":
                ranges.append(v[name] <= 10**9)
        conf = v["advisor.confidence"]
        grid = z3.Int("confidence_hundredths")
        ranges += [conf >= 0, conf <= 1]
        groups.append(ranges)
        groups.append([conf == z3.ToReal(grid) / 100])
        cur = self.old.doc.currency
        groups.append(
            [
                z3.Not(null["request.currency"]),
                uni.upper_is("request.currency", cur),
                v["request.currency"] == uni.code(cur),
                z3.Not(null["order.currency"]),
                v["order.currency"] == uni.code(cur),
            ]
        )
        order = ("order.amount", "order.refunded", "order.refundable")
        amount, refunded, refundable = (v[n] for n in order)
        groups.append([*(z3.Not(null[n]) for n in order), amount == refunded + refundable])
        known = {
            "request.source": KNOWN_SOURCES,
            "request.amount_source": AMOUNT_SOURCES,
            "request.reason_source": PROVENANCES,
        }
        groups.append(
            [z3.Or(*[v[n] == uni.code(t) for t in values]) for n, values in known.items()]
        )
        groups.append([z3.Not(null[n]) for n in FACTS])
        lits = []
        for i, constraints in enumerate(groups):
            lit = z3.Bool(f"nice_{i}")
            self.solver.add(z3.Implies(lit, z3.And(*constraints)))
            lits.append(lit)
        return lits

    def region(self, old_path: Any, new_path: Any, model: z3.ModelRef) -> Region | None:
        kind = classify(old_path.verdict, new_path.verdict)
        if kind is None:  # cannot happen: the solver only finds differing pairs
            return None
        accepted: list[Any] = []
        for lit in self.nice:
            if self.check(*accepted, lit) == z3.sat:
                accepted.append(lit)
        if self.check(*accepted) == z3.sat:
            model = self.solver.model()
        witness = self._witness(model)
        given = _given(witness, self.new.doc.currency)
        confirmed = self._confirm(witness, old_path, new_path, kind)
        facts = self._facts_for(old_path, new_path) if self.describe else []
        bounds = tuple(b for b in (self._bound(f) for f in facts) if b is not None)
        return Region(
            kind=kind,
            old=_side(self.old.doc, old_path),
            new=_side(self.new.doc, new_path),
            bounds=bounds,
            witness=witness,
            given=given,
            confirmed=confirmed,
        )

    def _facts_for(self, old_path: Any, new_path: Any) -> list[str]:
        """Facts worth bounding: what the two deciding rules and the changed rules read,
        the amount, and what a guardrail on either path reads. (An automatic payment passed
        every guardrail; ``render`` says so instead of bounding each guardrail fact.)"""
        names = {"request.amount"}
        for enc, path in ((self.old, old_path), (self.new, new_path)):
            names |= enc.rule_facts.get(path.rule, set())
        names |= self.changed_facts
        for path in (old_path, new_path):
            if path.guardrail:
                names |= set(GUARDRAIL_READS.get(path.guardrail, GUARDRAIL_FACTS))
        return [n for n in FACTS if n in names]

    def _witness(self, model: z3.ModelRef) -> dict[str, Any]:
        out: dict[str, dict[str, Any]] = {}
        for name, (kind, _) in FACTS.items():
            section, fact = name.split(".", 1)
            is_null = z3.is_true(model.eval(self.uni.null[name], model_completion=True))
            value: Any = None
            if not is_null:
                raw = model.eval(self.uni.value[name], model_completion=True)
                if kind in ("money", "int"):
                    value = raw.as_long()
                elif kind == "number":
                    frac = Fraction(raw.numerator_as_long(), raw.denominator_as_long())
                    value = float(frac)
                elif kind == "bool":
                    value = z3.is_true(raw)
                else:
                    value = self.uni.strings[raw.as_long()]
            out.setdefault(section, {})[fact] = value
        return out

    def _confirm(self, witness: dict[str, Any], old_path: Any, new_path: Any, kind: str) -> bool:
        old_engine, new_engine = self.engines
        try:
            a = old_engine.evaluate(witness, counterfactual=False)
            b = new_engine.evaluate(witness, counterfactual=False)
        except PolicyError:
            return False
        return (
            decision_path(old_engine.doc, a) == old_path.label
            and decision_path(new_engine.doc, b) == new_path.label
            and classify(decision_verdict(old_engine.doc, a), decision_verdict(new_engine.doc, b))
            == kind
        )

    def _bound(self, name: str) -> Bound | None:
        kind = FACTS[name][0]
        null, v = self.uni.null[name], self.uni.value[name]
        can_null = self.check(null) == z3.sat
        can_set = self.check(z3.Not(null)) == z3.sat
        if not can_set:
            return Bound(name, "null (unknown)") if can_null else None
        if kind in ("money", "int", "number"):
            text = self._range(name, kind)
        elif kind == "bool":
            values = [b for b in (True, False) if self.check(z3.Not(null), v == b) == z3.sat]
            text = None if len(values) == 2 else "true" if values[0] else "false"
        else:
            text = self._strings(name)
        if text is None:  # any value it can have
            return None if can_null else Bound(name, "known (not null)")
        return Bound(name, f"{text} or null" if can_null else text)

    def _range(self, name: str, kind: str) -> str | None:
        v = self.uni.value[name]
        term = z3.ToReal(v) if kind in ("money", "int") else v
        lo = self._least(term, name, sign=1)
        hi = self._least(-term, name, sign=-1)
        if hi is not None:
            hi = (-hi[0], hi[1])
        floor = Fraction(0) if kind == "money" else None
        ceiling = Fraction(MAX_EXACT_MINOR - 1) if kind == "money" else None
        lo_open = lo is None or (lo[0] == floor and not lo[1])
        hi_open = hi is None or (hi[0] == ceiling and not hi[1])
        if lo_open and hi_open:
            return None
        if lo_open and hi is not None:
            return f"{'<' if hi[1] else '≤'} {self._show(name, hi[0])}"
        if hi_open and lo is not None:
            return f"{'>' if lo[1] else '≥'} {self._show(name, lo[0])}"
        assert lo is not None and hi is not None
        if lo == hi:
            return f"= {self._show(name, lo[0])}"
        left = "above" if lo[1] else "from"
        right = "below" if hi[1] else "to"
        return f"{left} {self._show(name, lo[0])} {right} {self._show(name, hi[0])}"

    def _candidates(self, name: str) -> list[Fraction]:
        """Where a bound of ``name`` can lie: the literals the policies compare with."""
        kind = FACTS[name][0]
        scale = 10 ** money.exponent(self.old.doc.currency) if kind == "money" else 1
        more: set[Fraction] = set()
        for c in {Fraction(lit) * scale for lit in self.numbers}:
            if kind in ("money", "int"):
                more |= {Fraction(math.floor(c)), Fraction(math.ceil(c))}
                more |= {Fraction(math.floor(c)) - 1, Fraction(math.ceil(c)) + 1}
            else:
                more.add(c)
        if kind == "money":
            more |= {Fraction(0), Fraction(MAX_EXACT_MINOR - 1)}
            more = {c for c in more if 0 <= c < MAX_EXACT_MINOR}
        return sorted(more)

    def _least(self, term: Any, name: str, sign: int) -> tuple[Fraction, bool] | None:
        """(infimum, strict) of ``term`` over the region by search; None when unbounded.

        Bounds come from the literals rules compare with, so a binary search over them
        (plus a few passes down from a model) finds the exact infimum in a handful of checks.
        """
        kind = FACTS[name][0]
        known = z3.Not(self.uni.null[name])
        far = Fraction(-(10**16))
        if kind != "money" and self.check(known, term < _rv(far)) == z3.sat:
            return None
        cands = sorted(sign * c for c in self._candidates(name))
        lo_i, hi_i = 0, len(cands)
        while lo_i < hi_i:  # least candidate c with some point <= c
            mid = (lo_i + hi_i) // 2
            if self.check(known, term <= _rv(cands[mid])) == z3.sat:
                hi_i = mid
            else:
                lo_i = mid + 1
        below = cands[lo_i - 1] if lo_i > 0 else None
        ceiling = cands[lo_i] if lo_i < len(cands) else None
        # the infimum lies in (below, ceiling]: walk down from models a few times
        best: Fraction | None = ceiling
        for _ in range(8):
            if best is None:
                if self.check(known) != z3.sat:
                    return None
            elif self.check(known, term < _rv(best)) != z3.sat:
                return best, False
            value = self.solver.model().eval(term, model_completion=True)
            best = Fraction(value.numerator_as_long(), value.denominator_as_long())
        if below is not None and kind == "number":
            eps = Fraction(1, 10**9)
            if self.check(known, term < _rv(below + eps)) == z3.sat:
                return below, True
        # not pinned down: claim no bound on this side (the description stays a superset)
        return None

    def _show(self, name: str, value: Fraction) -> str:
        if name in MONEY_FACTS and value.denominator == 1:
            return money.format_money(int(value), self.old.doc.currency)
        return describe_number(value)

    def _strings(self, name: str) -> str | None:
        v, null = self.uni.value[name], self.uni.null[name]
        domain = self.uni.domain[name]
        wanted = {self.uni.code(t) for t in self.literals}
        wanted |= {self.uni.code("model_inference")}
        wanted |= {self.uni.code(d.currency) for d in (self.old.doc, self.new.doc)}
        interesting = [c for c in domain if c in wanted] if len(domain) > 12 else list(domain)
        possible = [c for c in interesting if self.check(z3.Not(null), v == c) == z3.sat]
        others = [c for c in domain if c not in interesting]
        other = bool(others) and (
            self.check(z3.Not(null), *[v != c for c in interesting]) == z3.sat
        )
        names = self.uni.strings
        if not other:
            if len(possible) == len(domain):
                return None
            return "one of " + ", ".join(sorted(names[c] for c in possible))
        excluded = [c for c in interesting if c not in possible]
        if not excluded:
            return None
        return "anything but " + ", ".join(sorted(names[c] for c in excluded))


def _rv(value: Fraction) -> z3.ArithRef:
    return z3.RealVal(f"{value.numerator}/{value.denominator}")


# --- engine side -----------------------------------------------------------------------------


def decision_path(doc: PolicyDocument, decision: Decision) -> str:
    """The path label (as in ``smt.encode_policy``) of a decision the engine made."""
    base = decision.policy_rule
    if decision.error:
        base += " (cannot evaluate)"
    if decision.rule.startswith("guardrail:"):
        return f"{base} -> {decision.rule}"
    decides = doc.default if decision.policy_rule == "default" else doc.rule(decision.policy_rule)
    if not decision.error and decides.outcome == "approve" and decision.outcome == "review":
        return f"{base} -> needs a person (tier {decides.tier})"
    return base


def decision_verdict(doc: PolicyDocument, decision: Decision) -> Verdict:
    """The comparable part of an engine decision (see ``smt.Verdict``)."""
    if decision.outcome != "review":
        return Verdict(decision.outcome, decision.tier)
    group = decision.approvers or ""
    members = group_members(doc, group)
    limit = money.to_minor(doc.approvers[group].limit, doc.currency) if members else None
    return Verdict("review", decision.tier, group, members, limit, doc.currency)


def _side(doc: PolicyDocument, path: Any) -> Side:
    v: Verdict = path.verdict
    limit = money.format_money(v.limit, doc.currency) if v.limit is not None else None
    return Side(path.label, v.outcome, v.tier, v.group, limit)


def _given(witness: dict[str, Any], currency: str) -> dict[str, Any]:
    """The witness as a policy test's ``given``: money in major units, as exact strings.

    A section without a currency has its money read in the policy's currency by
    ``policy test`` (``given_to_context``), so it is written in that currency here.
    """
    out: dict[str, Any] = {}
    for section, fields in witness.items():
        out[section] = dict(fields)
        cur = fields.get("currency") or currency
        for name in MONEY_FACTS:
            sec, fact = name.split(".", 1)
            if sec == section and fields.get(fact) is not None and cur:
                out[section][fact] = str(money.to_major(fields[fact], cur))
    return out


# --- output ----------------------------------------------------------------------------------


def _body(report: ProofReport) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "old": {"policy": report.old_policy, "hash": report.old_hash},
        "new": {"policy": report.new_policy, "hash": report.new_hash},
        "more_permissive": report.more_permissive,
        "complete": report.complete,
        "finished": report.finished,
        "partial": [asdict(p) for p in report.partial],
        "settings": [asdict(s) for s in report.settings],
        "regions": [
            {
                "kind": r.kind,
                "permissive": r.permissive,
                "old": asdict(r.old),
                "new": asdict(r.new),
                "bounds": {b.fact: b.text for b in r.bounds},
                "witness": r.witness,
                "given": r.given,
                "confirmed": r.confirmed,
            }
            for r in report.regions
        ],
    }


def _canonical_hash(data: dict[str, Any]) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def to_json(report: ProofReport) -> dict[str, Any]:
    """The whole report as JSON-ready data, with its ``hash`` (sha256 of the rest)."""
    body = _body(report)
    return {**body, "hash": _canonical_hash(body)}


def render(report: ProofReport) -> str:
    """Plain text for the CLI."""
    lines = [
        f"Proof: {report.old_policy} ({report.old_hash[:12]}) -> "
        f"{report.new_policy} ({report.new_hash[:12]})",
        "NEW is MORE PERMISSIVE than OLD somewhere (a second lead must confirm)."
        if report.more_permissive
        else "NEW is nowhere more permissive than OLD.",
    ]
    if not report.finished:
        lines.append(
            "! The solver did not finish: differences may be missing; treat as permissive."
        )
    for p in report.partial:
        lines.append(
            f"! Partial: {p.version} rule {p.rule} uses {p.construct}, which is not modelled; "
            "it is treated as able to match anything (or fail), so regions involving it are "
            "possible, not proven."
        )
    for s in report.settings:
        mark = "looser" if s.permissive else "changed"
        lines.append(f"Setting {s.name}: {s.old} -> {s.new} ({mark})")
    if not report.regions:
        lines.append("No request is decided differently.")
    for n, r in enumerate(report.regions, 1):
        flag = "MORE PERMISSIVE" if r.permissive else "stricter/other"
        lines.append("")
        lines.append(f"[{n}] {r.kind} ({flag}): {KINDS[r.kind][1]}")
        lines.append(f"    OLD: {r.old.text()}")
        lines.append(f"    NEW: {r.new.text()}")
        if r.new.outcome == "approve" or r.old.outcome == "approve":
            lines.append(
                "    (an automatic payment also passed every guardrail: verified customer, "
                "no possible duplicate, amount not from the model, confidence, currency)"
            )
        if r.bounds:
            lines.append("    where:")
            lines += [f"      {b.fact}: {b.text}" for b in r.bounds]
        check = "confirmed by the engine" if r.confirmed else "NOT confirmed by the engine"
        lines.append(f"    example ({check}):")
        lines.append("      " + json.dumps(r.witness, sort_keys=True))
    lines += ["", f"report hash: {report.hash}"]
    return "\n".join(lines)


def main_prove(old: str, new: str, as_json: bool = False) -> tuple[int, str]:
    """What ``refund-desk policy prove OLD NEW [--json]`` does: (exit code, output).

    0: nowhere more permissive; 3: more permissive somewhere (or not provably not);
    2: an input could not be read.
    """
    try:
        report = prove(load_policy(old), load_policy(new))
    except (PolicyError, OSError, Unsupported) as exc:
        if as_json:
            return EXIT_ERROR, json.dumps({"error": str(exc)}, indent=2)
        return EXIT_ERROR, f"cannot prove: {exc}"
    code = EXIT_SOMEWHERE if report.more_permissive else EXIT_NOWHERE
    if as_json:
        return code, json.dumps(to_json(report), indent=2, sort_keys=True, ensure_ascii=False)
    return code, render(report)
