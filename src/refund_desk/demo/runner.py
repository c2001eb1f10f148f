"""`refund-desk demo`: the whole product on a new user's machine, with no configuration.

The server runs on embedded defaults (SQLite in a temporary or named folder, the sandbox
processor, the offline advisor, a generated secret) together with the local Slack sandbox,
mounted in the same process, so there is one address to open. It seeds a sample store: the
demo policy as v1, sample payments, and a stream of refund requests queued as jobs with due
times over the first minute, so a restart with the same `--dir` resumes the stream instead of
losing it; and one payment nobody asked about yet (`TRY_PAYMENT`, `TRY_EMAIL`: the README's
first screen tries `/refund` with them). It never talks to real Slack: a set SLACK_BOT_TOKEN
makes it refuse to start.

Its addresses are printed once it listens, again as the last lines once the sample stream has
been worked through (so the log does not scroll them away), and once more when it stops.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from sqlalchemy import func, select
from sqlmodel import col

from refund_desk import clock, money
from refund_desk.cases.desk import Desk
from refund_desk.cases.intake import parse_request, submit
from refund_desk.cases.people import roles
from refund_desk.customers.intake import channel_key
from refund_desk.demo.paypal import PayPalEmulator, PayPalEmulatorServer
from refund_desk.demo.slack import Channel, SlackEmulator, User
from refund_desk.demo.slack.oidc import TEAM_ID
from refund_desk.governance.versions import control, publish
from refund_desk.jobs.queue import ClaimedJob, enqueue
from refund_desk.policy import PolicyDocument, parse_policy
from refund_desk.runtime import Runtime, build, install_jobs
from refund_desk.settings import Settings, settle_secret
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import IntakeKey, Job, SandboxPayment

ARRIVE = "demo.request"
OPERATOR = "U0OPS1"
STOREFRONT = Actor("api", "demo-storefront")
NAMES = {
    OPERATOR: "Olivia Ortiz",
    "U0LEAD1": "Lee Park",
    "U0LEAD2": "Lina Haddad",
    "U0FIN1": "Farah Nasser",
    "U0FIN2": "Felix Braun",
    "U0MGR1": "Maya Chen",
    "U0AUD1": "Ada Brooks",
}
CHANNEL_NAMES = {"approvals": "refunds", "finance": "finance-approvals", "policy": "refund-policy"}
# A payment of the sample store nobody has asked about: the pair to try `/refund` (and the
# customer's form) with. Its id is fixed, so the README can give it.
TRY_PAYMENT, TRY_EMAIL, TRY_PAID = "py_lamp40", "sam@example.com", "40.00"
TRY_COMMAND = f"/refund {TRY_PAID} {TRY_PAYMENT} {TRY_EMAIL} I changed my mind about the lamp"


class DemoRefused(Exception):
    """The demo will not start; the message says why."""


@dataclass(frozen=True)
class Sample:
    """One sample request: when it arrives (share of the stream) and what it is about."""

    at: float
    paid: str
    asked: str
    message: str
    age_days: int = 5
    chargebacks: int = 0
    filed_by: str | None = None  # filed by a person with /refund instead of the storefront
    paypal: bool = False  # paid with PayPal (the emulator) instead of the sandbox


SAMPLES = (
    Sample(0.02, "30.00", "20.00", "The vase arrived broken, shards everywhere.", 3),
    Sample(
        0.08,
        "45.00",
        "45.00",
        "I changed my mind about the lamp, please refund it.",
        10,
        paypal=True,
    ),
    Sample(0.14, "75.00", "75.00", "Wrong item: I got a toaster.", filed_by="U0LEAD1"),
    Sample(0.22, "60.00", "80.00", "The chair wobbles, I want all my money back and more."),
    Sample(0.30, "320.00", "320.00", "My parcel never arrived, tracking says lost.", 12),
    Sample(0.40, "60.00", "60.00", "I was charged twice for the same order.", 8, chargebacks=1),
    Sample(0.50, "35.00", "35.00", "The mug came chipped and cracked.", 2, paypal=True),
    Sample(0.62, "30.00", "30.00", "The shoes are the wrong size, I ordered 42 and got 39.", 120),
    Sample(0.75, "25.00", "25.00", "The teapot arrived broken in the box.", 6, paypal=True),
    Sample(0.90, "150.00", "150.00", "The jacket does not fit, I would like my money back.", 20),
)


class DemoSettings(Settings):
    """Settings from the demo alone: the environment (a real deployment's) is not read."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def policy_source() -> str:
    return resources.files("refund_desk.demo").joinpath("policy.yaml").read_text()


def users_from(doc: PolicyDocument) -> list[User]:
    """The picker's people, each with the words `people.roles` gives them: the same answer the
    checks use, so nobody is shown a role the policy does not give them."""
    named = [
        OPERATOR,
        *(member for approvers in doc.approvers.values() for member in approvers.members),
        *(doc.leads or []),
        *(doc.managers.members if doc.managers else []),
        *(doc.operators.members if doc.operators else []),
        *(doc.viewers.members if doc.viewers else []),
    ]
    return [
        User(uid, NAMES.get(uid, uid), ", ".join(roles(doc, uid, None)) or "no role in the policy")
        for uid in dict.fromkeys(named)
        if not uid.startswith("S")  # a user group, not a person to act as
    ]


def channels_from(doc: PolicyDocument) -> list[Channel]:
    named = {str(cid): CHANNEL_NAMES.get(key, key) for key, cid in (doc.channels or {}).items()}
    for group, approvers in doc.approvers.items():
        if approvers.channel and approvers.channel not in named:
            named[approvers.channel] = f"{group}-approvals"
    return [Channel(cid, name) for cid, name in named.items()]


def demo_settings(
    folder: Path, host: str, port: int, sandbox: SlackEmulator, paypal: PayPalEmulatorServer
) -> Settings:
    local = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    base = f"http://{local}:{port}"
    settings = DemoSettings(
        DATABASE_URL=f"sqlite:///{folder / 'demo.db'}",
        SLACK_BOT_TOKEN=sandbox.bot_token,
        SLACK_SIGNING_SECRET=sandbox.signing_secret,
        SLACK_API_URL=f"{base}/sandbox/slack/api/",
        REFUND_DESK_CHANNEL="C0REFUNDS",
        REFUND_DESK_SWEEP_SECONDS=2,
        REFUND_DESK_PUBLIC_URL=base,
        REFUND_DESK_EVIDENCE_DIR=folder / "evidence",
        REFUND_DESK_PROCESSOR="sandbox,paypal",
        PAYPAL_CLIENT_ID=paypal.emulator.client_id,
        PAYPAL_CLIENT_SECRET=paypal.emulator.client_secret,
        PAYPAL_API_BASE=paypal.url,
        PAYPAL_WEBHOOK_ID=paypal.emulator.webhook_id,
        # Sign in with Slack at /desk, through the emulator's consent page.
        SLACK_CLIENT_ID=sandbox.oidc.client_id,
        SLACK_CLIENT_SECRET=sandbox.oidc.client_secret,
        SLACK_OIDC_ISSUER=f"{base}/sandbox/slack",
        SLACK_TEAM_ID=TEAM_ID,
    )
    sandbox.oidc.redirect_urls.append(f"{base}/desk/sign-in/callback")  # as manifest.yml does
    return settle_secret(settings)


# ---------------------------------------------------------------- the sample store


def seed(runtime: Runtime, paypal: PayPalEmulator, *, stream_seconds: float) -> bool:
    """Publish the demo policy, make the payments and queue the stream; False if done before."""
    desk = runtime.desk
    with runtime.db.read() as session:
        if control(session).active_version is not None:
            return False
    with runtime.db.write() as session:
        publish(session, desk.audit, source=policy_source(), actor=Actor("cli", "demo"))
    assert runtime.sandbox is not None
    start = clock.now()
    payments = [  # the processors are remote: their own transactions, before ours
        paypal.pay(
            sample.paid,
            email=f"customer{n}@example.com",
            name=f"Customer {n}",
            created=start - timedelta(days=sample.age_days),
        ).capture_id
        if sample.paypal
        else runtime.sandbox.create_payment(
            amount=money.to_minor(sample.paid, "USD"),
            currency="usd",
            email=f"customer{n}@example.com",
            name=f"Customer {n}",
            chargebacks=sample.chargebacks,
            created_at=start - timedelta(days=sample.age_days),
        )
        for n, sample in enumerate(SAMPLES, start=1)
    ]
    try_payment(runtime, start)
    with runtime.db.write() as session:
        for n, (sample, payment) in enumerate(zip(SAMPLES, payments, strict=True), start=1):
            email = f"customer{n}@example.com"
            enqueue(
                session,
                kind=ARRIVE,
                payload={
                    "n": n,
                    "request": {
                        "payment": payment,
                        "email": email,
                        "currency": "USD",
                        "amount": sample.asked,
                        "message": sample.message,
                        "source": "slack" if sample.filed_by else "api",
                    },
                    "filed_by": sample.filed_by,
                },
                due_at=start + timedelta(seconds=1 + sample.at * stream_seconds),
            )
    return True


def try_payment(runtime: Runtime, start: datetime) -> None:
    """The sandbox payment to try `/refund` with, under its fixed id (the sandbox's own
    payments have random ones)."""
    assert runtime.sandbox is not None
    with runtime.sandbox.db.write() as session:
        session.add(
            SandboxPayment(
                id=TRY_PAYMENT,
                amount=money.to_minor(TRY_PAID, "USD"),
                currency="usd",
                email=TRY_EMAIL,
                name="Sam Reyes",
                created_at=start - timedelta(days=6),
            )
        )


def arrive(desk: Desk, job: ClaimedJob) -> None:
    """A sample request reaches the desk through the same intake as the API and `/refund`.

    A retried job finds the case it filed by what its capture wrote in the same transaction:
    an intake key of the sample's number under the demo's own channel key (`channel_key`:
    revoked, it never authenticates), which no API request can write or reuse."""
    external_id = f"demo-{job.payload['n']}"
    filed_by = job.payload.get("filed_by")
    request = parse_request({**job.payload["request"], "external_id": external_id})
    actor = Actor("human", filed_by) if filed_by else STOREFRONT
    submitted = submit(
        desk,
        request,
        actor=actor,
        api_key_id=channel_key(desk, "demo"),
        idempotency_key=external_id,
        requested_by=filed_by,
    )
    if submitted.created:
        desk.start(submitted.job_id)


def stream_left(runtime: Runtime) -> int:
    """Sample requests not yet filed (the bench and the test wait for zero)."""
    demo = channel_key(runtime.desk, "demo")  # what `arrive` files under, and nothing else
    with runtime.db.read() as session:
        filed = session.scalar(
            select(func.count()).select_from(IntakeKey).where(col(IntakeKey.api_key_id) == demo)
        )
    return len(SAMPLES) - int(filed or 0)


# ---------------------------------------------------------------- running it


def prepare(
    *, host: str, port: int, folder: Path, stream_seconds: float, paypal: PayPalEmulatorServer
) -> tuple[Runtime, SlackEmulator]:
    if os.environ.get("SLACK_BOT_TOKEN"):
        raise DemoRefused(
            "SLACK_BOT_TOKEN is set: the demo never runs against real Slack. "
            "Unset it for the demo, or use `refund-desk serve` for a real workspace."
        )
    if not 0 < stream_seconds <= 3600:
        raise DemoRefused("--stream-seconds must be more than 0 and at most 3600")
    doc = parse_policy(policy_source())
    sandbox = SlackEmulator.create(users=users_from(doc), channels=channels_from(doc))
    runtime = build(demo_settings(folder, host, port, sandbox, paypal), migrate=True)
    runtime.extra_jobs[ARRIVE] = partial(arrive, runtime.desk)
    install_jobs(runtime)
    seed(runtime, paypal.emulator, stream_seconds=stream_seconds)
    return runtime, sandbox


def run(*, host: str, port: int, directory: Path | None, stream_seconds: float) -> None:
    """Serve the demo until interrupted; a temporary folder is removed afterwards."""
    import uvicorn

    from refund_desk.web.app import create_app

    # A sweep every two seconds (and an overlapping one skipped) is not news in a demo.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # every click is a request to the app
    logging.getLogger("refund_desk.web.app").addFilter(_without_page_reads)

    temporary = directory is None
    folder = (
        Path(tempfile.mkdtemp(prefix="refund-desk-demo-"))
        if directory is None
        else directory.expanduser().resolve()
    )
    folder.mkdir(parents=True, exist_ok=True)
    paypal = PayPalEmulatorServer()  # PayPal on loopback; its state lives as long as the demo
    try:
        runtime, sandbox = prepare(
            host=host, port=port, folder=folder, stream_seconds=stream_seconds, paypal=paypal
        )
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(runtime, slack_emulator=sandbox),
                host=host,
                port=port,
                log_level="warning",
                access_log=False,
            )
        )
        where = Where(runtime.settings.public_url, folder, temporary)
        settled = partial(_settled, runtime)
        threading.Thread(target=_announce, args=(server, where, settled), daemon=True).start()
        _serve(server)
        runtime.db.dispose()
        if not server.started:
            raise DemoRefused(f"the server could not listen on {host}:{port}")
        _say(where.stopped())
    finally:
        paypal.stop()
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)


def _without_page_reads(record: logging.LogRecord) -> bool:
    """The sandbox page reads its state every second while it is open: not news in the log
    (which would scroll the addresses away). Its clicks and everything else are kept."""
    args = record.args if isinstance(record.args, tuple) else ()
    return not (len(args) > 1 and args[0] == "GET" and str(args[1]).startswith("/sandbox"))


def _serve(server: Any) -> None:
    """Run until Ctrl+C or a TERM signal. uvicorn shuts down gracefully and then raises the
    signal again: a TERM with its default action would end the process on the spot (no
    goodbye, a temporary folder left behind), so both end here as an interrupt."""

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, interrupted) if main else None
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # the demo stops as asked
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class Where:
    """What the demo prints about itself: where to open it, what to try, where its data is."""

    base: str
    folder: Path
    temporary: bool

    def addresses(self) -> str:
        return (
            f"  Slack sandbox:  {self.base}/sandbox/   (pick who you are under Acting as)\n"
            f"  web desk:       {self.base}/desk   (sign in with the sandbox's Slack as anyone)\n"
            f"  customer form:  {self.base}/request\n"
            f"  API docs:       {self.base}/docs\n"
            f"  try, as Olivia in the sandbox:  {TRY_COMMAND}\n"
        )

    def data(self) -> str:
        if self.temporary:
            return f"  data in {self.folder} (removed when the demo stops; --dir DIR keeps it)\n"
        return f"  data in {self.folder} (kept: --dir {self.folder} again resumes it)\n"

    def started(self) -> str:
        return (
            f"Refund Desk demo: open {self.base}/sandbox/\n{self.addresses()}{self.data()}"
            "  sample requests arrive over the next minute; press Ctrl+C to stop\n"
        )

    def ready(self) -> str:
        return (
            f"Refund Desk demo: the sample requests are in; open {self.base}/sandbox/\n"
            f"{self.addresses()}{self.data()}  press Ctrl+C to stop\n"
        )

    def stopped(self) -> str:
        gone = "its data is removed" if self.temporary else f"its data is kept in {self.folder}"
        return (
            f"Refund Desk demo stopped ({gone}). It served:\n{self.addresses()}"
            "  ./dev demo starts it again.\n"
        )


def _settled(runtime: Runtime) -> bool:
    """Every sample request filed and nothing due to run now: the log goes quiet."""
    if stream_left(runtime) > 0:
        return False
    soon = clock.now() + timedelta(seconds=1)
    with runtime.db.read() as session:
        due = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(col(Job.status) == "pending", col(Job.due_at) <= soon)
        )
    return not due


def _announce(
    server: Any, where: Where, settled: Callable[[], bool], patience: float = 300
) -> None:
    """Print the addresses once the server really listens (the browser test waits for them),
    and again as the last lines once the sample stream is worked through."""
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if not server.started:
        return
    _say(where.started())
    deadline = time.monotonic() + patience
    while not server.should_exit and time.monotonic() < deadline:
        time.sleep(1)
        if settled():
            time.sleep(1)  # the last job's own log lines first
            _say(where.ready())
            return


def _say(words: str) -> None:
    # One write: `print` writes its text and its line end apart, and a log line from another
    # thread (the start-up jobs log as this runs) could land between the two.
    sys.stdout.write("\n" + words)
    sys.stdout.flush()
