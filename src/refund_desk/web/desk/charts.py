"""Charts drawn on the server as SVG: no script, no library, nothing from another origin.

Each chart is a `Chart`: the SVG (`role="img"`, named by its `<title>` and `<desc>`), and the
same figures as a table for screen readers and for anyone who would rather read (the page puts
it in `<details>`). Series differ by pattern as well as by colour (solid, stripes, dots,
cross-hatch) and the legend names them, so nothing is said by colour alone. Every drawing is
400 units wide and scales to its box: at a phone's 375 px the text stays about 11 px high.

The page's strict CSP allows no inline style: only SVG presentation attributes are used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

WIDTH = 400
FONT = 12
# Colours with at least 3:1 against white (graphics) and apart from one another in lightness;
# patterns tell the series apart without them.
COLOURS = ("#0b5394", "#a1001a", "#7a4b00", "#0a6b2f", "#5b2a86", "#4a4a4a")
PATTERNS = ("solid", "stripes", "dots", "cross")
LABEL_CHARS = 56  # a bar's label past this is cut with "…" (the table beside it has it whole)


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]


@dataclass(frozen=True)
class Chart:
    """One picture and its text equivalent."""

    key: str
    title: str
    summary: str  # one sentence: what the picture shows (its <desc>)
    columns: list[str]
    rows: list[list[str]]
    svg: Markup = field(default_factory=lambda: Markup(""))
    empty: bool = False


def _fill(key: str, index: int) -> str:
    pattern = PATTERNS[index % len(PATTERNS)]
    return COLOURS[index % len(COLOURS)] if pattern == "solid" else f"url(#{key}-p{index})"


def _defs(key: str, count: int) -> str:
    """One pattern per series after the first: stripes, dots, cross-hatch, over its colour."""
    out = []
    for i in range(count):
        colour, pattern = COLOURS[i % len(COLOURS)], PATTERNS[i % len(PATTERNS)]
        if pattern == "solid":
            continue
        if pattern == "stripes":
            marks = f'<path d="M0,6 L6,0" stroke="{colour}" stroke-width="2.5"/>'
        elif pattern == "dots":
            marks = f'<circle cx="3" cy="3" r="1.8" fill="{colour}"/>'
        else:
            marks = f'<path d="M0,0 L6,6 M6,0 L0,6" stroke="{colour}" stroke-width="1.5"/>'
        out.append(
            f'<pattern id="{key}-p{i}" width="6" height="6" patternUnits="userSpaceOnUse">'
            f'<rect width="6" height="6" fill="#ffffff"/>{marks}</pattern>'
        )
    return f"<defs>{''.join(out)}</defs>" if out else ""


def _open(key: str, title: str, summary: str, height: float) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" aria-labelledby="{key}-t {key}-d" '
        f'font-family="system-ui, sans-serif" font-size="{FONT}">'
        f'<title id="{key}-t">{escape(title)}</title><desc id="{key}-d">{escape(summary)}</desc>'
    )


def _legend(key: str, series: Sequence[Series], y: float) -> tuple[str, float]:
    """Swatches with names, wrapped over lines; returns the markup and the height used."""
    out, x, line = [], 0.0, 0
    for i, s in enumerate(series):
        width = 22 + 7 * len(s.name)
        if x and x + width > WIDTH:
            x, line = 0.0, line + 1
        top = y + line * 18
        out.append(
            f'<rect x="{x:.1f}" y="{top:.1f}" width="14" height="14" fill="{_fill(key, i)}" '
            f'stroke="{COLOURS[i % len(COLOURS)]}"/>'
            f'<text x="{x + 18:.1f}" y="{top + 12:.1f}">{escape(s.name)}</text>'
        )
        x += width + 12
    return "".join(out), (line + 1) * 18 + 6


def _nothing(key: str, title: str, summary: str) -> Markup:
    return Markup(
        _open(key, title, summary, 60)
        + '<rect x="0.5" y="0.5" width="399" height="59" fill="#ffffff" stroke="#c8c8c8"/>'
        + f'<text x="{WIDTH / 2}" y="35" text-anchor="middle">No data in this period</text></svg>'
    )


def columns(
    key: str,
    title: str,
    summary: str,
    labels: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[float], str],
    *,
    label_head: str = "Day",
) -> Chart:
    """Stacked columns over a sequence (days): one column per label, one layer per series."""
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    rows = [
        [labels[i], *[fmt(s.values[i]) for s in series], fmt(totals[i])] for i in range(len(labels))
    ]
    head = [label_head, *[s.name for s in series], "Total"]
    top = max(totals, default=0)
    if not labels or top <= 0:
        return Chart(key, title, summary, head, rows, _nothing(key, title, summary), True)
    ticks = {frac: fmt(top * frac) for frac in (0.0, 0.5, 1.0)}
    if ticks[0.5] in (ticks[0.0], ticks[1.0]):  # a count of 1: no "0" half way
        del ticks[0.5]
    widest = max(len(t) for t in ticks.values())
    left, plot_h, legend_y = max(44.0, widest * FONT * 0.62 + 8), 160.0, 196.0
    legend, legend_h = _legend(key, series, legend_y)
    height = legend_y + legend_h
    step = (WIDTH - left) / len(labels)
    bar = max(step * 0.8, 1.0)
    parts = [_open(key, title, summary, height), _defs(key, len(series))]
    for frac, tick in ticks.items():  # gridlines with values
        y = 10 + plot_h * (1 - frac)
        parts.append(
            f'<line x1="{left:.1f}" x2="{WIDTH}" y1="{y:.1f}" y2="{y:.1f}" stroke="#c8c8c8"/>'
            f'<text x="{left - 4:.1f}" y="{y + 4:.1f}" text-anchor="end">{escape(tick)}</text>'
        )
    for i, label in enumerate(labels):
        x, base = left + i * step + (step - bar) / 2, 10 + plot_h
        for j, s in enumerate(series):
            value = s.values[i]
            if value <= 0:
                continue
            h = plot_h * value / top
            base -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{_fill(key, j)}" stroke="{COLOURS[j % len(COLOURS)]}" stroke-width="0.5">'
                f"<title>{escape(label)}: {escape(s.name)} {escape(fmt(value))}</title></rect>"
            )
    shown = sorted({0, len(labels) // 2, len(labels) - 1})
    for i in shown:
        x = left + i * step + step / 2
        anchor = "start" if i == 0 else "end" if i == len(labels) - 1 else "middle"
        if len(shown) == 1:
            anchor = "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{10 + plot_h + 16:.1f}" text-anchor="{anchor}">'
            f"{escape(labels[i])}</text>"
        )
    parts.append(legend)
    parts.append("</svg>")
    return Chart(key, title, summary, head, rows, Markup("".join(parts)))


def bars(
    key: str,
    title: str,
    summary: str,
    labels: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[float], str],
    *,
    label_head: str = "",
) -> Chart:
    """Horizontal bars: per label, one bar per series, each with its value written beside it;
    the label above its bars, so long names (rules, reasons) fit a phone's width."""
    rows = [[labels[i], *[fmt(s.values[i]) for s in series]] for i in range(len(labels))]
    head = [label_head, *[s.name for s in series]]
    top = max((v for s in series for v in s.values), default=0)
    if not labels or top <= 0:
        return Chart(key, title, summary, head, rows, _nothing(key, title, summary), True)
    bar_h, gap = 14.0, 4.0
    plot_w = WIDTH - 110.0  # room for the value after the longest bar
    y = 0.0
    body = []
    for i, label in enumerate(labels):
        shown = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
        body.append(f'<text x="0" y="{y + FONT:.1f}" font-weight="600">{escape(shown)}</text>')
        y += FONT + 6
        for j, s in enumerate(series):
            value = s.values[i]
            w = plot_w * value / top if value > 0 else 0.0
            said = fmt(value)
            name = f"{s.name}: " if len(series) > 1 else ""
            body.append(
                f'<rect x="0" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{bar_h}" '
                f'fill="{_fill(key, j)}" stroke="{COLOURS[j % len(COLOURS)]}" stroke-width="0.5">'
                f"<title>{escape(label)}: {escape(name)}{escape(said)}</title></rect>"
                f'<text x="{w + 4:.1f}" y="{y + bar_h - 3:.1f}">{escape(said)}</text>'
            )
            y += bar_h + gap
        y += 8
    legend, legend_h = _legend(key, series, y) if len(series) > 1 else ("", 0.0)
    height = y + legend_h
    parts = [_open(key, title, summary, height), _defs(key, len(series)), *body, legend, "</svg>"]
    return Chart(key, title, summary, head, rows, Markup("".join(parts)))
