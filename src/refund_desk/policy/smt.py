"""Policy rules as solver terms: the translation the prover (``prove.py``) reasons with.

Three layers, each mirroring one piece of the runtime exactly:

* ``parse_expression`` reads the subset of zen's expression language policies use
  (literals, facts, ``not``/``!``, unary ``-``, ``+ - * /``, the six comparisons, ``and``,
  ``or``, ``in``/``not in`` over a list or a numeric interval) into a small tree; anything
  else raises ``Unsupported`` naming the construct.
* ``Translator`` turns a tree into a ``Sym``: the value zen would compute, as z3 terms,
  *including* zen's type errors (an ordering comparison or arithmetic on a non-number, ``not``
  or the left side of ``and``/``or`` on a non-boolean), so "a comparison with a null fact sends
  the case to a person" comes out of the same rules zen applies. ``and``/``or`` short-circuit
  and hand back the right operand untouched, as zen does.
* ``encode_policy`` lays a whole document out as disjoint *paths*: each rule (or its
  evaluation error, or the default) followed by every way ``engine.apply_guardrails`` can end,
  each path with a constant verdict (outcome, tier, approver group). Exactly one path holds
  for every valid context.

Facts are typed variables (``Universe``): money as integers of minor units (converted to
major units with the exponent of the currency beside it, as ``context.to_zen`` does),
counts as integers, the confidence as an exact rational, booleans, and every string fact as
a code over a finite table (every literal either policy mentions, every known value, and a
few fresh strings that equal none of them). Each fact has a separate ``null`` flag.
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal
from fractions import Fraction
from typing import Any

import z3

from refund_desk import money
from refund_desk.policy.context import (
    AMOUNT_SOURCES,
    FACTS,
    MAX_EXACT_MINOR,
    PROVENANCES,
    REASONS,
)
from refund_desk.policy.schema import (
    DEFAULT_TIER,
    Decides,
    PolicyDocument,
    approver_limit,
    group_members,
)

KNOWN_SOURCES: tuple[str, ...] = (
    "api",
    "web_form",
    "shopify",
    "zendesk",
    "gorgias",
    "slack",
    "email",
    "agent",
)
FRESH_STRINGS: tuple[str, ...] = ("unlisted-1", "unlisted-2", "unlisted-3")
"""Strings no policy names: a free string fact equal to none of the literals."""

OUTCOME_CODE = {"deny": 0, "review": 1, "approve": 2}


class Unsupported(Exception):
    """An expression uses a construct the translation does not model; ``construct`` says which."""

    def __init__(self, construct: str) -> None:
        super().__init__(construct)
        self.construct = construct


# --- parsing ---------------------------------------------------------------------------------

Node = tuple[Any, ...]

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<num>\d+(?:\.\d+)?(?![\w]))
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`(?:[^`\\]|\\.)*`)
  | (?P<name>[A-Za-z_$#][\w$]*(?:\.[A-Za-z_]\w*)*)
  | (?P<op>==|!=|<=|>=|\?\?|\.\.|[<>+\-*/%^!()\[\],?:.{}&|])
    )""",
    re.VERBOSE,
)
_COMPARE = ("==", "!=", "<", ">", "<=", ">=")
_PREC = {"or": 1, "and": 2, "in": 3, "not in": 3, "+": 4, "-": 4, "*": 5, "/": 5}
for _op in _COMPARE:
    _PREC[_op] = 3


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise Unsupported(f"unreadable text at {text[pos : pos + 12]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, ahead: int = 0) -> tuple[str, str]:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else ("end", "")

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        _kind, got = self.take()
        if got != value:
            raise Unsupported(f"expected {value!r}, found {got or 'end'!r}")

    def binary_op(self) -> str | None:
        kind, value = self.peek()
        if kind == "name" and value in ("and", "or", "in"):
            return value
        if kind == "name" and value == "not" and self.peek(1) == ("name", "in"):
            return "not in"
        if kind == "op" and value in _PREC:
            return value
        if kind == "op" and value in ("%", "^", "??", "?", "&", "|"):
            raise Unsupported(f"operator {value!r}")
        return None

    def expr(self, min_prec: int = 1) -> Node:
        left = self.unary()
        while True:
            op = self.binary_op()
            if op is None or _PREC[op] < min_prec:
                return left
            self.take()
            if op == "not in":
                self.take()
            if op in ("in", "not in"):
                left = self.membership(left, negated=op == "not in")
            else:
                right = self.expr(_PREC[op] + 1)
                left = ("bin", op, left, right)

    def unary(self) -> Node:
        kind, value = self.peek()
        if (kind == "name" and value == "not") or (kind == "op" and value == "!"):
            self.take()
            return ("not", self.unary())
        if kind == "op" and value == "-":
            self.take()
            return ("neg", self.unary())
        return self.primary()

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            return ("num", Decimal(value))
        if kind == "str":
            body = value[1:-1]
            if "\\" in body:
                raise Unsupported("escaped string literal")
            return ("str", body)
        if kind == "name":
            if value == "true":
                return ("bool", True)
            if value == "false":
                return ("bool", False)
            if value == "null":
                return ("null",)
            if value.startswith(("$", "#")):
                raise Unsupported(f"reference {value}")
            nxt = self.peek()
            if nxt == ("op", "("):
                raise Unsupported(f"function {value}()")
            if nxt in (("op", "["), ("op", ".")):
                raise Unsupported(f"member access on {value}")
            if value not in FACTS:
                raise Unsupported(f"unknown name {value}")
            return ("fact", value)
        if (kind, value) == ("op", "("):
            inner = self.expr()
            self.expect(")")
            return inner
        if kind == "op" and value in ("[", "{"):
            raise Unsupported("array or object value outside `in`")
        raise Unsupported(f"unexpected {value or 'end of expression'!r}")

    def membership(self, left: Node, *, negated: bool) -> Node:
        kind, opening = self.take()
        if kind != "op" or opening not in ("[", "(", "]"):
            raise Unsupported("`in` over something other than a list or an interval")
        if self.peek() == ("op", "]") and opening == "[":
            self.take()
            return ("in", left, (), negated)
        first = self.expr(4)
        if self.peek() == ("op", ".."):
            self.take()
            second = self.expr(4)
            _, closing = self.take()
            if closing not in ("]", ")", "["):
                raise Unsupported("malformed interval")
            lo, hi = _literal_number(first), _literal_number(second)
            if lo is None or hi is None:
                raise Unsupported("interval with bounds that are not number literals")
            return ("interval", left, lo, hi, opening == "[", closing == "]", negated)
        if opening != "[":
            raise Unsupported("malformed list")
        items = [first]
        while self.peek() == ("op", ","):
            self.take()
            items.append(self.expr(4))
        self.expect("]")
        return ("in", left, tuple(items), negated)


def _literal_number(node: Node) -> Decimal | None:
    if node[0] == "num":
        return Decimal(node[1])
    if node[0] == "neg" and node[1][0] == "num":
        return -Decimal(node[1][1])
    return None


def parse_expression(text: str) -> Node:
    """A ``when`` expression -> tree; ``Unsupported`` for constructs outside the subset."""
    parser = _Parser(text)
    node = parser.expr()
    if parser.peek()[0] != "end":
        raise Unsupported(f"unexpected {parser.peek()[1]!r}")
    return node


def _nodes(node: Node) -> Iterator[Node]:
    """A tree and every tree inside it (the items of an ``in`` list included)."""
    yield node
    for child in node[1:]:
        if isinstance(child, tuple):
            for item in [child] if child and isinstance(child[0], str) else child:
                if isinstance(item, tuple):
                    yield from _nodes(item)


def string_literals(node: Node) -> set[str]:
    """Every string literal in a tree."""
    return {n[1] for n in _nodes(node) if n[0] == "str"}


def number_literals(node: Node) -> set[Decimal]:
    """Every number literal in a tree (interval bounds included)."""
    out: set[Decimal] = set()
    for n in _nodes(node):
        if n[0] == "num":
            out.add(Decimal(n[1]))
        elif n[0] == "interval":
            out |= {n[2], n[3]}
    return out


def facts_of(node: Node) -> set[str]:
    """Facts a tree reads."""
    return {n[1] for n in _nodes(node) if n[0] == "fact"}


# --- facts as solver variables ---------------------------------------------------------------


def _true() -> Any:
    return z3.BoolVal(True)


def _false() -> Any:
    return z3.BoolVal(False)


def _real(value: Decimal | Fraction | int) -> z3.ArithRef:
    frac = Fraction(value)
    return z3.RealVal(f"{frac.numerator}/{frac.denominator}")


@dataclass
class Universe:
    """The typed facts as z3 variables, and the finite string table they range over."""

    strings: list[str] = field(default_factory=list)
    currency_info: dict[int, tuple[str, int]] = field(default_factory=dict)
    """currency spelling code -> (upper-case ISO code, exponent)."""
    null: dict[str, z3.BoolRef] = field(default_factory=dict)
    value: dict[str, Any] = field(default_factory=dict)
    domain: dict[str, list[int]] = field(default_factory=dict)
    constraints: list[z3.BoolRef] = field(default_factory=list)

    def code(self, text: str) -> int:
        """The code of a string, added to the table if new."""
        if text not in self.strings:
            self.strings.append(text)
        return self.strings.index(text)

    @classmethod
    def build(cls, docs: Sequence[PolicyDocument], literals: Iterable[str]) -> Universe:
        """Variables for every fact; string domains cover every literal the policies use."""
        uni = cls()
        lits = sorted(set(literals))
        for text in (*REASONS, *KNOWN_SOURCES, *AMOUNT_SOURCES, *PROVENANCES, *lits):
            uni.code(text)
        # currencies: the policies' own, every literal that names one, one stand-in per
        # exponent, each in upper and lower case (guardrails compare upper-cased codes,
        # rules compare the exact string)
        codes = {d.currency for d in docs}
        codes |= {t.upper() for t in lits if t.upper() in money.CURRENCIES}
        for exp in sorted(set(money.CURRENCIES.values())):
            alike = [c for c in sorted(money.CURRENCIES) if money.CURRENCIES[c] == exp]
            if not codes.intersection(alike):
                codes.add(alike[0])
            # a second currency of each exponent that no policy names (a foreign payment)
            spare = [c for c in alike if c not in codes]
            if spare:
                codes.add(spare[0])
        spellings: set[str] = set()
        for code in codes:
            spellings |= {code, code.lower()}
        spellings |= {t for t in lits if t.upper() in codes}
        for text in sorted(spellings):
            uni.currency_info[uni.code(text)] = (text.upper(), money.CURRENCIES[text.upper()])
        for text in FRESH_STRINGS:
            uni.code(text)
        every = list(range(len(uni.strings)))
        for name, (kind, _) in FACTS.items():
            var = name.replace(".", "__")
            uni.null[name] = z3.Bool(f"null__{var}")
            if kind in ("money", "int"):
                v: Any = z3.Int(var)
                if kind == "money":
                    uni.constraints += [v >= 0, v < MAX_EXACT_MINOR]
            elif kind == "number":
                v = z3.Real(var)
            elif kind == "bool":
                v = z3.Bool(var)
            else:
                v = z3.Int(var)
                if kind == "reason":
                    dom = [uni.strings.index(r) for r in REASONS]
                elif kind == "currency":
                    dom = sorted(uni.currency_info)
                else:
                    dom = every
                uni.domain[name] = dom
                uni.constraints.append(z3.Or(*[v == c for c in dom]))
            uni.value[name] = v
        return uni

    def exponent_is(self, currency_fact: str, exp: int, policy_currency: str) -> z3.BoolRef:
        """The section's money is read with exponent ``exp`` (a null currency: the policy's)."""
        var = self.value[currency_fact]
        codes = [c for c, (_, e) in self.currency_info.items() if e == exp]
        named = z3.Or(*[var == c for c in codes]) if codes else _false()
        if money.CURRENCIES[policy_currency] == exp:
            return z3.Or(self.null[currency_fact], named)
        return z3.And(z3.Not(self.null[currency_fact]), named)

    def upper_is(self, currency_fact: str, code: str) -> z3.BoolRef:
        """The currency fact is set and names ``code`` in any case."""
        var = self.value[currency_fact]
        codes = [c for c, (up, _) in self.currency_info.items() if up == code]
        return z3.And(
            z3.Not(self.null[currency_fact]), z3.Or(*[var == c for c in codes] or [_false()])
        )

    def same_upper(self, a: str, b: str) -> z3.BoolRef:
        """Both currency facts set and equal ignoring case."""
        groups: dict[str, list[int]] = {}
        for c, (up, _) in self.currency_info.items():
            groups.setdefault(up, []).append(c)
        va, vb = self.value[a], self.value[b]
        same = [
            z3.And(z3.Or(*[va == c for c in cs]), z3.Or(*[vb == c for c in cs]))
            for cs in groups.values()
        ]
        return z3.And(z3.Not(self.null[a]), z3.Not(self.null[b]), z3.Or(*same))

    def is_true(self, name: str) -> z3.BoolRef:
        return z3.And(z3.Not(self.null[name]), self.value[name])

    def is_false(self, name: str) -> z3.BoolRef:
        return z3.And(z3.Not(self.null[name]), z3.Not(self.value[name]))


# --- expressions as solver terms -------------------------------------------------------------


@dataclass(frozen=True)
class Sym:
    """What zen computes for an expression: an error, or a value of one of four kinds.

    When ``err`` is false exactly one of ``null``/``isb``/``isn``/``iss`` holds; ``b``, ``n``
    and ``s`` carry the boolean, number (major units) and string code.
    """

    err: Any = field(default_factory=_false)
    null: Any = field(default_factory=_false)
    isb: Any = field(default_factory=_false)
    isn: Any = field(default_factory=_false)
    iss: Any = field(default_factory=_false)
    b: Any = field(default_factory=_false)
    n: Any = field(default_factory=lambda: z3.RealVal(0))
    s: Any = field(default_factory=lambda: z3.IntVal(-1))  # no string


def _ite(c: Any, x: Sym, y: Sym) -> Sym:
    return Sym(**{f.name: z3.If(c, getattr(x, f.name), getattr(y, f.name)) for f in fields(Sym)})


def _boolean(err: Any, value: Any) -> Sym:
    return Sym(err=err, isb=_true(), b=value)


def _equal(x: Sym, y: Sym) -> Any:
    return z3.Or(
        z3.And(x.null, y.null),
        z3.And(x.isb, y.isb, x.b == y.b),
        z3.And(x.isn, y.isn, x.n == y.n),
        z3.And(x.iss, y.iss, x.s == y.s),
    )


def _exact_divisor(value: Decimal) -> bool:
    """Dividing by ``value`` gives a finite decimal (zen's decimal division is then exact)."""
    frac = Fraction(value)
    num = frac.numerator
    for p in (2, 5):
        while num % p == 0:
            num //= p
    return num == 1


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul}


class Translator:
    """Expression trees -> ``Sym`` over one universe, reading money in ``currency``'s units."""

    def __init__(self, uni: Universe, currency: str) -> None:
        self.uni = uni
        self.currency = currency
        self._facts: dict[str, Sym] = {}

    def fact(self, name: str) -> Sym:
        if name in self._facts:
            return self._facts[name]
        kind = FACTS[name][0]
        null, v = self.uni.null[name], self.uni.value[name]
        if kind == "money":
            cur = f"{name.split('.')[0]}.currency"
            minor = z3.ToReal(v)
            n: Any = minor
            for exp in sorted(set(money.CURRENCIES.values()), reverse=True):
                scaled = minor / (10**exp) if exp else minor
                n = z3.If(self.uni.exponent_is(cur, exp, self.currency), scaled, n)
            sym = Sym(null=null, isn=z3.Not(null), n=n)
        elif kind == "int":
            sym = Sym(null=null, isn=z3.Not(null), n=z3.ToReal(v))
        elif kind == "number":
            sym = Sym(null=null, isn=z3.Not(null), n=v)
        elif kind == "bool":
            sym = Sym(null=null, isb=z3.Not(null), b=v)
        else:
            sym = Sym(null=null, iss=z3.Not(null), s=v)
        self._facts[name] = sym
        return sym

    def sym(self, node: Node) -> Sym:
        tag = node[0]
        if tag == "num":
            return Sym(isn=_true(), n=_real(node[1]))
        if tag == "str":
            return Sym(iss=_true(), s=z3.IntVal(self.uni.code(node[1])))
        if tag == "bool":
            return Sym(isb=_true(), b=z3.BoolVal(node[1]))
        if tag == "null":
            return Sym(null=_true())
        if tag == "fact":
            return self.fact(node[1])
        if tag == "not":
            x = self.sym(node[1])
            return _boolean(z3.Or(x.err, z3.Not(x.isb)), z3.Not(x.b))
        if tag == "neg":
            x = self.sym(node[1])
            return Sym(err=z3.Or(x.err, z3.Not(x.isn)), isn=_true(), n=-x.n)
        if tag == "bin":
            return self.binary(node[1], node[2], node[3])
        if tag == "in":
            x = self.sym(node[1])
            items = [self.sym(item) for item in node[2]]
            err = z3.Or(x.err, *[i.err for i in items])
            hit = z3.Or(*[_equal(x, i) for i in items]) if items else _false()
            return _boolean(err, z3.Not(hit) if node[3] else hit)
        if tag == "interval":
            x = self.sym(node[1])
            lo, hi = _real(node[2]), _real(node[3])
            above = x.n >= lo if node[4] else x.n > lo
            below = x.n <= hi if node[5] else x.n < hi
            inside = z3.And(above, below)
            return _boolean(z3.Or(x.err, z3.Not(x.isn)), z3.Not(inside) if node[6] else inside)
        raise Unsupported(f"construct {tag}")

    def binary(self, op: str, left: Node, right: Node) -> Sym:
        if op == "/":
            divisor = _literal_number(right)
            if divisor is None:
                raise Unsupported("division by something other than a number literal")
            if divisor != 0 and not _exact_divisor(divisor):
                raise Unsupported(f"division by {divisor} (zen rounds the quotient)")
        if op == "*" and _literal_number(left) is None and _literal_number(right) is None:
            raise Unsupported("multiplying two facts (non-linear)")
        x = self.sym(left)
        if op == "and":
            y = self.sym(right)
            err = z3.Or(x.err, z3.Not(x.isb), z3.And(x.b, y.err))
            rest = _ite(x.b, y, Sym(isb=_true(), b=_false()))
            return Sym(err, rest.null, rest.isb, rest.isn, rest.iss, rest.b, rest.n, rest.s)
        if op == "or":
            y = self.sym(right)
            err = z3.Or(x.err, z3.Not(x.isb), z3.And(z3.Not(x.b), y.err))
            rest = _ite(x.b, Sym(isb=_true(), b=_true()), y)
            return Sym(err, rest.null, rest.isb, rest.isn, rest.iss, rest.b, rest.n, rest.s)
        y = self.sym(right)
        err = z3.Or(x.err, y.err)
        if op == "==":
            return _boolean(err, _equal(x, y))
        if op == "!=":
            return _boolean(err, z3.Not(_equal(x, y)))
        numeric = z3.Or(err, z3.Not(x.isn), z3.Not(y.isn))
        if op in ("<", ">", "<=", ">="):
            cmp = {
                "<": x.n < y.n,
                ">": x.n > y.n,
                "<=": x.n <= y.n,
                ">=": x.n >= y.n,
            }[op]
            return _boolean(numeric, cmp)
        if op == "+" and self._may_be_string(left) and self._may_be_string(right):
            raise Unsupported("string concatenation")
        if op in _ARITHMETIC:
            return Sym(err=numeric, isn=_true(), n=_ARITHMETIC[op](x.n, y.n))
        divisor = _literal_number(right)
        assert divisor is not None
        if divisor == 0:  # zen gives null for a division by zero
            return Sym(err=numeric, null=_true())
        return Sym(err=numeric, isn=_true(), n=x.n / _real(divisor))

    def _may_be_string(self, node: Node) -> bool:
        if node[0] == "str":
            return True
        if node[0] == "fact":
            return FACTS[node[1]][0] in ("string", "reason", "currency")
        return node[0] == "bin" and node[1] in ("and", "or", "+")


# --- whole policies as paths -----------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What a person or the payment system sees of a decision, compared across versions.

    ``group``/``members``/``limit`` only for a review (limit in minor units of ``currency``).
    """

    outcome: str
    tier: int
    group: str | None = None
    members: tuple[str, ...] = ()
    limit: int | None = None
    currency: str = ""


@dataclass(frozen=True)
class Path:
    """One way a policy can end: the rule that decided, how guardrails changed it, the verdict."""

    label: str
    rule: str
    guardrail: str | None
    verdict: Verdict
    cond: Any


@dataclass(frozen=True)
class Opaque:
    """A rule whose ``when`` the translation cannot read."""

    rule: str
    construct: str


@dataclass
class Encoded:
    """A policy laid out as paths over a universe."""

    doc: PolicyDocument
    paths: list[Path]
    opaque: list[Opaque]
    rule_facts: dict[str, set[str]]


def rule_trees(doc: PolicyDocument) -> dict[str, Node | Unsupported]:
    """Each rule's parsed ``when`` or the reason it cannot be read."""
    out: dict[str, Node | Unsupported] = {}
    for rule in doc.rules:
        try:
            out[rule.id] = parse_expression(rule.when)
        except Unsupported as exc:
            out[rule.id] = exc
    return out


def _review_verdict(doc: PolicyDocument, decides: Decides, tier: int) -> Verdict:
    group = doc.approvers_for(decides)
    members = group_members(doc, group)
    return Verdict("review", tier, group, members, approver_limit(doc, group), doc.currency)


def _verdict(doc: PolicyDocument, decides: Decides) -> Verdict:
    if decides.outcome == "review":
        return _review_verdict(doc, decides, decides.tier)
    return Verdict(decides.outcome, decides.tier)


def encode_policy(
    doc: PolicyDocument, uni: Universe, trees: dict[str, Node | Unsupported]
) -> Encoded:
    """Every path through the rules and the guardrails, each with its condition."""
    tr = Translator(uni, doc.currency)
    opaque: list[Opaque] = []
    rule_facts: dict[str, set[str]] = {}
    # (rule id, error?, decides, condition) before guardrails
    pre: list[tuple[str, bool, Decides, Any]] = []
    reached: Any = _true()
    for rule in doc.rules:
        tree = trees[rule.id]
        sym: Sym | None = None
        if isinstance(tree, tuple):
            try:
                sym = tr.sym(tree)
                rule_facts[rule.id] = facts_of(tree)
            except Unsupported as exc:
                tree = exc
        if sym is None:
            assert isinstance(tree, Unsupported)
            opaque.append(Opaque(rule.id, tree.construct))
            # may match anything, or fail: free variables, shared by every version that has
            # the very same expression read in the same currency (it decides alike there)
            key = f"{doc.currency}:{' '.join(rule.when.split())}"
            tag = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
            err: Any = z3.Bool(f"opaque_err_{tag}")
            holds: Any = z3.And(z3.Not(err), z3.Bool(f"opaque_val_{tag}"))
        else:
            err = z3.Or(sym.err, z3.Not(sym.isb))
            holds = z3.And(z3.Not(err), sym.b)
        pre.append((rule.id, True, rule, z3.And(reached, err)))
        pre.append((rule.id, False, rule, z3.And(reached, holds)))
        reached = z3.And(reached, z3.Not(err), z3.Not(holds))
    pre.append(("default", False, doc.default, reached))
    paths: list[Path] = []
    shared = _guardrail_terms(doc, uni)
    for rule_id, error, decides, cond in pre:
        paths += _guardrail_paths(doc, shared, rule_id, error, decides, cond)
    return Encoded(doc, paths, opaque, rule_facts)


GUARDRAIL_FACTS = (
    "request.amount",
    "request.currency",
    "request.possible_duplicate",
    "request.amount_source",
    "order.refundable",
    "order.currency",
    "customer.verified",
    "advisor.confidence",
    "advisor.injection_suspected",
)

GUARDRAIL_READS: dict[str, tuple[str, ...]] = {
    "guardrail:exceeds-refundable": ("request.amount", "order.refundable"),
    "guardrail:currency-mismatch": ("request.currency", "order.currency"),
    "guardrail:possible-duplicate": ("request.possible_duplicate",),
    "guardrail:unverified-customer": ("customer.verified",),
    "guardrail:model-amount": ("request.amount_source",),
    "guardrail:suspected-injection": ("advisor.injection_suspected",),
    "guardrail:low-confidence": ("advisor.confidence",),
    "guardrail:unknown-amount": ("request.amount", "order.refundable"),
}
"""The facts each guardrail reads (for describing regions)."""


def _guardrail_terms(doc: PolicyDocument, uni: Universe) -> dict[str, Any]:
    """The guardrail conditions, built once per policy (they do not depend on the rule)."""
    v, null = uni.value, uni.null
    same = z3.And(
        uni.same_upper("request.currency", "order.currency"),
        uni.upper_is("request.currency", doc.currency),
    )
    known = z3.And(z3.Not(null["request.amount"]), z3.Not(null["order.refundable"]))
    low: Any = _false()
    if doc.advisor.min_confidence is not None:
        bar = _real(Decimal(repr(doc.advisor.min_confidence)))
        low = z3.Or(null["advisor.confidence"], v["advisor.confidence"] < bar)
    model = z3.And(
        z3.Not(null["request.amount_source"]),
        v["request.amount_source"] == uni.code("model_inference"),
    )
    return {
        "same": same,
        "over": z3.And(known, v["request.amount"] > v["order.refundable"]),
        "dup": uni.is_true("request.possible_duplicate"),
        "inj": uni.is_true("advisor.injection_suspected"),
        "approve": [
            ("possible-duplicate", z3.Not(uni.is_false("request.possible_duplicate"))),
            ("unverified-customer", z3.Not(uni.is_true("customer.verified"))),
            ("model-amount", model),
            ("suspected-injection", uni.is_true("advisor.injection_suspected")),
            ("low-confidence", low),
            ("unknown-amount", z3.Not(known)),
        ],
    }


def _guardrail_paths(
    doc: PolicyDocument,
    shared: dict[str, Any],
    rule_id: str,
    error: bool,
    decides: Decides,
    cond: Any,
) -> list[Path]:
    """``engine.apply_guardrails`` for one policy answer, split into its disjoint endings."""
    label = f"{rule_id} (cannot evaluate)" if error else rule_id
    if error:
        outcome, tier = "review", max(3, decides.tier)
        own = _review_verdict(doc, decides, tier)
    else:
        outcome, tier = decides.outcome, decides.tier
        own = _verdict(doc, decides)
    dup = _false() if error else shared["dup"]
    inj = _false() if error else shared["inj"]
    held = z3.Or(dup, inj)  # a person decides these, a denial included
    out: list[Path] = []

    def add(suffix: str | None, verdict: Verdict, c: Any) -> None:
        name = label if suffix is None else f"{label} -> {suffix}"
        out.append(Path(name, rule_id, suffix, verdict, z3.And(cond, c)))

    rest: Any = _true()
    if outcome == "deny":
        add(None, own, z3.Not(held))
        rest = held
    same, over = shared["same"], shared["over"]
    exceeds = z3.And(same, over, z3.Not(held))
    add(
        "guardrail:exceeds-refundable", Verdict("deny", DEFAULT_TIER["deny"]), z3.And(rest, exceeds)
    )
    rest = z3.And(rest, z3.Not(exceeds))
    fired: list[tuple[str, Any]] = []
    if outcome == "deny":
        fired.append(("possible-duplicate", dup))
        fired.append(("suspected-injection", inj))
    fired.append(("currency-mismatch", z3.Not(same)))
    if outcome == "approve":
        fired += shared["approve"]
    person = _review_verdict(doc, decides, max(3, tier))
    none_before: Any = _true()
    for name, c in fired:
        add(f"guardrail:{name}", person, z3.And(rest, none_before, c))
        none_before = z3.And(none_before, z3.Not(c))
    clean = z3.And(rest, none_before)
    if outcome == "approve" and tier >= 3:
        add(f"needs a person (tier {tier})", person, clean)
    elif outcome != "deny":
        add(None, own, clean)
    return out


def describe_number(value: Fraction) -> str:
    """A rational as a short decimal when it is one, else as a fraction."""
    dec = Decimal(value.numerator) / Decimal(value.denominator)
    if Fraction(dec) == value:
        return format(dec.normalize(), "f")
    return f"{value.numerator}/{value.denominator}"
