"""Cases: search by customer email (the blind index: exact), case, payment or order id; filter by
status, tier, rule, source, decider, processor, dates and amounts; sort; page with a cursor;
export what is filtered as the CSV of `refund-desk cases export`."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from refund_desk import clock, money
from refund_desk.bot.outbox import active_doc
from refund_desk.cases import listing
from refund_desk.cases.errors import InvalidRequest
from refund_desk.cases.intake import SOURCES
from refund_desk.cases.lifecycle import Status
from refund_desk.policy.schema import SLUG as SLUG_PATTERN
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Case
from refund_desk.web.desk.access import reader
from refund_desk.web.desk.queue import record_mark
from refund_desk.web.desk.render import keep, page
from refund_desk.web.desk.session import Viewer

router = APIRouter(include_in_schema=False)
SLUG = re.compile(SLUG_PATTERN)
PAGE = 50
FIELDS = (
    "q", "status", "tier", "rule", "source", "decider", "processor",
    "since", "until", "currency", "min", "max", "sort",
)  # fmt: skip
SORTS = {
    "newest": "Newest first",
    "oldest": "Oldest first",
    "largest": "Largest amount first",
    "smallest": "Smallest amount first",
    "updated": "Last changed first",
}


@dataclass
class Search:
    """The form as typed, the filters it means, and a sentence for each field that means none."""

    given: dict[str, str]
    filters: listing.Filters = field(default_factory=listing.Filters)
    sort: str = "newest"
    problems: dict[str, str] = field(default_factory=dict)

    def query(self, **extra: str) -> str:
        kept = {k: v for k, v in self.given.items() if v}
        return urlencode({**kept, **extra})


def read_search(
    request: Request, runtime: Runtime, policy_currency: str, processors: list[str]
) -> Search:
    given = {name: request.query_params.get(name, "").strip() for name in FIELDS}
    found = Search(given)
    problems = found.problems
    q = given["q"]
    email_hash = runtime.desk.vault.email_hash(q) if "@" in q else None
    status = given["status"] or None
    if status is not None and status not in set(Status):
        problems["status"] = "Choose a status from the list."
    tier = None
    if given["tier"]:
        if given["tier"] in ("1", "2", "3", "4"):
            tier = int(given["tier"])
        else:
            problems["tier"] = "A tier is 1, 2, 3 or 4."
    source = given["source"] or None
    if source is not None and source not in SOURCES:
        problems["source"] = "Choose a source from the list."
    rule = given["rule"] or None
    if rule is not None and not SLUG.fullmatch(rule):
        problems["rule"] = f"{rule!r} is not a rule's id such as large or damaged-small."
    processor = given["processor"] or None
    if processor is not None and processor not in processors:
        problems["processor"] = "Choose a processor from the list."
    since = _day(given["since"], "since", problems)
    until = _day(given["until"], "until", problems)
    currency = (given["currency"] or policy_currency).upper()
    if currency not in money.CURRENCIES:
        problems["currency"] = f"{given['currency']!r} is not a currency code such as USD."
        currency = policy_currency
    low = _amount(given["min"], currency, "min", problems)
    high = _amount(given["max"], currency, "max", problems)
    sort = given["sort"] or "newest"
    if sort not in SORTS:
        problems["sort"] = "Choose an order from the list."
        sort = "newest"
    found.sort = sort
    found.filters = listing.Filters(
        status=status,
        since=since,
        until=until + timedelta(days=1) if until else None,
        email_hash=email_hash,
        reference=None if email_hash or not q else q,
        tier=tier,
        rule=rule,
        source=source,
        decider=given["decider"] or None,
        processor=processor,
        currency=currency if (low is not None or high is not None) else None,
        amount_min=low,
        amount_max=high,
    )
    return found


def _processors(runtime: Runtime) -> list[str]:
    return runtime.desk.processor.name.split(",")


def _day(value: str, name: str, problems: dict[str, str]) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    except ValueError:
        problems[name] = f"{value!r} is not a date such as 2026-11-01."
        return None


def _amount(value: str, currency: str, name: str, problems: dict[str, str]) -> int | None:
    if not value:
        return None
    try:
        return money.to_minor(value, currency)
    except (money.InvalidAmount, ArithmeticError, ValueError):
        problems[name] = f"{value!r} is not an amount in {currency}."
        return None


@router.get("/desk/cases")
def cases(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    runtime: Runtime = request.app.state.runtime
    with runtime.db.read() as session:
        doc = active_doc(session)
        search = read_search(request, runtime, doc.currency if doc else "USD", _processors(runtime))
        rows: list[Case] = []
        cursor = request.query_params.get("cursor") or None
        next_cursor = None
        if not search.problems:
            try:
                rows, next_cursor = listing.page(
                    session, search.filters, cursor=cursor, limit=PAGE, order=search.sort
                )
            except InvalidRequest:
                search.problems["cursor"] = "That page link is out of date: start again."
        shown = listing.export_rows(session, rows)
        rules = [*(rule.id for rule in doc.rules), "default"] if doc is not None else []
    return page(
        request,
        viewer,
        "cases.html",
        title="Cases",
        section="cases",
        search=search,
        rows=shown,
        next_url=f"/desk/cases?{search.query(cursor=next_cursor)}" if next_cursor else None,
        first_url=f"/desk/cases?{search.query()}" if cursor else None,
        export_url=f"/desk/cases.csv?{search.query()}",
        statuses=[s.value for s in Status],
        sources=SOURCES,
        sorts=SORTS,
        rules=rules,
        processors=_processors(runtime),
        mark=record_mark(runtime),
    )


@router.get("/desk/cases.csv")
def export(request: Request, viewer: Viewer = Depends(reader)) -> Response:
    """What the list shows, every page of it, as `refund-desk cases export --format csv`."""
    runtime: Runtime = request.app.state.runtime
    with runtime.db.read() as session:
        doc = active_doc(session)
        search = read_search(request, runtime, doc.currency if doc else "USD", _processors(runtime))
    if search.problems:
        return cases(request, viewer)

    def lines() -> Iterator[str]:
        out = io.StringIO()
        writer = listing.ExportWriter(out, "csv")
        with runtime.db.read() as session:
            for row in listing.iter_export(session, search.filters, order=search.sort):
                writer.write(row)
                if out.tell() > 64_000:
                    yield out.getvalue()
                    out.seek(0)
                    out.truncate()
        yield out.getvalue()

    stamp = clock.now().strftime("%Y%m%d-%H%M")
    headers = {"Content-Disposition": f'attachment; filename="cases-{stamp}.csv"'}
    return keep(request, StreamingResponse(lines(), media_type="text/csv", headers=headers))
