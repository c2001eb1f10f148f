"""The house rules of the layout, checked over the source: no import cycles (function-level
imports included), and the wall clock read only by the clock and the edges."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "refund_desk"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import that runs: module level and inside functions, not `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.append(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            found.append(node)

    Visitor().visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if not (node.module or "").startswith("refund_desk"):
                    continue
                assert node.module is not None
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[name].add(full if full in modules else node.module)
            else:
                graph[name].update(a.name for a in node.names if a.name in modules)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    counter = itertools.count()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_the_check_sees_a_cycle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


# Where real time may be read: the clock itself, the scheduler's timers, and signatures or
# request stamps that outside services check against their own clocks.
WALL_CLOCK_EDGES = {
    "refund_desk/clock.py",
    "refund_desk/web/app.py",
    "refund_desk/customers/couriers.py",
}
WALL_CLOCK = re.compile(r"datetime\.(now|utcnow)\(|\btime\.time\(\)|\bdate\.today\(\)")


def test_the_core_reads_time_from_the_one_clock() -> None:
    readers = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel in WALL_CLOCK_EDGES or rel.startswith("refund_desk/demo/"):
            continue
        if WALL_CLOCK.search(path.read_text()):
            readers.append(rel)
    assert readers == []


# Slack's markup: a mention, a broadcast or link (`<@U1>`, `<!here>`, `<!subteam^S1>`), an
# emoji code, or *bold*, written inside a string literal.
MRKDWN = re.compile(
    r"(?<!\(\?)<[@!#][A-Za-z{]|(?<![\w:/]):[a-z][a-z0-9_+-]*[a-z0-9]:(?![\w/])|(?<![\w*])\*[{A-Za-z][^*\n]*\*(?!\w)"
)


NOT_MARKUP = {":memory:"}  # SQLite's in-memory database, not an emoji


def _string_literals(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            pieces = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            out.append((node.lineno, "".join(str(p) for p in pieces)))
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                lines.add(doc.value.lineno)
    return lines


def slack_markup_outside_the_bot() -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("refund_desk/bot/", "refund_desk/demo/")):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for line, value in _string_literals(tree):
            if line not in docs and value not in NOT_MARKUP and MRKDWN.search(value):
                found.append(f"{rel}:{line}: {value[:60]!r}")
    return found


def test_slack_markup_is_written_only_by_the_bot() -> None:
    """The core says what (``refund_desk.text``); ``bot/mrkdwn.py`` says it in Slack's markup."""
    assert slack_markup_outside_the_bot() == []


def test_the_markup_check_sees_mentions_emoji_and_bold() -> None:
    for sample in ('f"<@{user}> did"', '":rocket: published"', '"set the mode to *{mode}*"'):
        assert MRKDWN.search(ast.literal_eval(sample.removeprefix("f"))), sample
    for sample in ('"12:30:00"', '"https://x/y"', '"a * b * c"', '"amount <= 50"', r'r"(?<!my\s)"'):
        assert not MRKDWN.search(ast.literal_eval(sample)), sample


# Which database runs is storage's business: the domain asks `Database` what it needs
# (`one_writer`, `checkpoint`, `upsert`), never which dialect it is talking to.
DIALECT_CHECK = re.compile(r"\.dialect\b|sqlalchemy\.dialects|\bdb\.is_sqlite\b|_on_postgresql")


def dialect_checks_outside_storage() -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("refund_desk/storage/"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if DIALECT_CHECK.search(line):
                found.append(f"{rel}:{number}: {line.strip()[:80]}")
    return found


def test_only_storage_asks_which_database_it_is() -> None:
    assert dialect_checks_outside_storage() == []


def test_the_dialect_check_sees_the_usual_spellings() -> None:
    for sample in (
        'if session.get_bind().dialect.name == "postgresql":',
        "from sqlalchemy.dialects import postgresql",
        "if not desk.db.is_sqlite:",
    ):
        assert DIALECT_CHECK.search(sample), sample
    assert not DIALECT_CHECK.search("if settings.is_sqlite:")
