"""A desk wired to a real SMTP server, a webhook receiver and a fake helpdesk on loopback."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlmodel import Session

from refund_desk import clock
from refund_desk.payments.sandbox import SandboxProcessor
from refund_desk.runtime import Runtime, build
from refund_desk.storage.db import Database
from refund_desk.storage.models import Case, CustomerMessage
from tests.conftest import make_settings
from tests.fakes.mail_server import MailServer
from tests.fakes.receiver import Receiver
from tests.helpers import CUSTOMER, Harness

EMAIL_SECRET = "inbound-mail-secret-0123456789"
WEBHOOK_SECRET = "whsec_outbound_0123456789abcdef"
SHOPIFY_SECRET = "shopify-app-secret-0123456789"
ZENDESK_SECRET = "zendesk-signing-secret-0123456789"
GORGIAS_SECRET = "gorgias-shared-secret-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
PHOTO = b"\x89PNG\r\n\x1a\n" + b"a cracked teapot lid " * 8
OTHER = b"\x89PNG\r\n\x1a\n" + b"the box it came in " * 8


class Channels(Harness):
    def __init__(self, runtime: Any, mail: MailServer, helpdesk: Receiver) -> None:
        super().__init__(runtime)
        self.mail = mail
        self.helpdesk = helpdesk

    # ------------------------------------------------------------ web form

    def form_token(self, path: str = "/request") -> str:
        page = self.client.get(path)
        assert page.status_code == 200, page.text
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert found, page.text
        return found.group(1)

    def submit_form(
        self,
        fields: dict[str, str],
        files: Sequence[tuple[str, bytes]] = (),
        token: str | None = None,
        **kw: Any,
    ) -> Any:
        data = {"csrf_token": token or self.form_token(), **fields}
        upload = [
            ("evidence", (name, content, "application/octet-stream")) for name, content in files
        ]
        return self.client.post("/request", data=data, files=upload or None, **kw)

    def evidence_file(self, case_id: str, index: int = 0) -> bytes | None:
        """A case's evidence file as its signed link serves it (None once it is gone)."""
        with self.runtime.db.read() as session:
            case = session.get(Case, case_id)
            assert case is not None
            item = [i for i in case.evidence or [] if i.get("kind") == "file"][index]
        response = self.client.get("/evidence/" + str(item["view_url"]).split("/evidence/", 1)[1])
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return bytes(response.content)

    # ------------------------------------------------------------ email and platforms

    def post_email(self, raw: bytes, secret: str = EMAIL_SECRET) -> Any:
        return self.client.post(
            "/webhooks/email",
            content=raw,
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "message/rfc822"},
        )

    def mail_request(
        self, payment: str, *, amount: str | None, photos: Sequence[bytes], n: int
    ) -> Any:
        """A request by email with `photos` attached, its Message-ID numbered `n`."""
        lines = (f"Amount: {amount}\n" if amount else "") + "The teapot arrived broken."
        return self.post_email(
            raw_email(
                subject=f"Refund for order {payment}",
                text=lines,
                attachments=[(f"p{i}.png", "image/png", p) for i, p in enumerate(photos)],
                message_id=f"<m{n}@example.com>",
            )
        )

    def mailed_case(self, payment: str, amount: str, photos: Sequence[bytes], n: int) -> str:
        """`mail_request` that makes a case; its id."""
        response = self.mail_request(payment, amount=amount, photos=photos, n=n)
        assert response.status_code == 201, response.text
        return str(response.json()["case"])

    def post_shopify(
        self,
        body: bytes,
        *,
        secret: str = SHOPIFY_SECRET,
        topic: str = "returns/request",
        signature: str | None = None,
    ) -> Any:
        mac = hmac.new(secret.encode(), body, hashlib.sha256).digest()
        headers = {
            "X-Shopify-Hmac-Sha256": signature
            if signature is not None
            else base64.b64encode(mac).decode(),
            "X-Shopify-Topic": topic,
            "X-Shopify-Shop-Domain": "acme.myshopify.com",
            "Content-Type": "application/json",
        }
        return self.client.post("/webhooks/shopify", content=body, headers=headers)

    def post_zendesk(
        self, body: bytes, *, secret: str = ZENDESK_SECRET, stamp: str | None = None
    ) -> Any:
        stamp = stamp or clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        mac = hmac.new(secret.encode(), stamp.encode() + body, hashlib.sha256).digest()
        headers = {
            "X-Zendesk-Webhook-Signature": base64.b64encode(mac).decode(),
            "X-Zendesk-Webhook-Signature-Timestamp": stamp,
            "Content-Type": "application/json",
        }
        return self.client.post("/webhooks/zendesk", content=body, headers=headers)

    # ------------------------------------------------------------ looking

    def case(self, case_id: str) -> Case:
        with self.runtime.db.read() as session:
            case = session.get(Case, case_id)
            assert case is not None
            return case

    def told(self, case_id: str) -> list[CustomerMessage]:
        with self.runtime.db.read() as session:
            return list(
                session.scalars(
                    select(CustomerMessage)
                    .where(CustomerMessage.case_id == case_id)  # type: ignore[arg-type]
                    .order_by(CustomerMessage.id)  # type: ignore[arg-type]
                ).all()
            )

    def case_count(self) -> int:
        with self.runtime.db.read() as session:
            return int(session.scalar(select(func.count()).select_from(Case)) or 0)


def raw_email(
    *,
    sender: str = CUSTOMER,
    subject: str,
    text: str,
    attachments: Sequence[tuple[str, str, bytes]] = (),
    message_id: str = "<m1@example.com>",
    **headers: str,
) -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Ada Lovelace <{sender}>"
    msg["To"] = "refunds@shop.example"
    msg["Subject"] = subject
    msg["Message-ID"] = message_id
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    msg.set_content(text)
    for filename, ctype, data in attachments:
        maintype, subtype = ctype.split("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return msg.as_bytes()


@pytest.fixture()
def mail() -> Iterator[MailServer]:
    server = MailServer()
    yield server
    server.stop()


def _receiver() -> Iterator[Receiver]:
    fake = Receiver()
    fake.start()
    yield fake
    fake.stop()


receiver = pytest.fixture(_receiver, name="receiver")  # the integrator's webhook endpoint
helpdesk = pytest.fixture(_receiver, name="helpdesk")


@pytest.fixture()
def channels(
    any_db_url: str, tmp_path: Path, mail: MailServer, helpdesk: Receiver
) -> Iterator[Channels]:
    """On SQLite and on PostgreSQL: the flows touch unique keys and upserts that differ."""
    assert helpdesk.server is not None
    port = helpdesk.server.server_address[1]
    settings = make_settings(
        any_db_url,
        SMTP_URL=mail.url,
        REFUND_DESK_FROM="Acme Refunds <refunds@shop.example>",
        REFUND_DESK_WEBHOOK_SECRET=WEBHOOK_SECRET,
        REFUND_DESK_ALLOW_PRIVATE_CALLBACKS="true",  # the test receivers listen on loopback
        REFUND_DESK_EMAIL_SECRET=EMAIL_SECRET,
        REFUND_DESK_EVIDENCE_DIR=str(tmp_path / "evidence"),
        REFUND_DESK_PUBLIC_URL="https://desk.example",
        SHOPIFY_WEBHOOK_SECRET=SHOPIFY_SECRET,
        ZENDESK_WEBHOOK_SECRET=ZENDESK_SECRET,
        GORGIAS_WEBHOOK_SECRET=GORGIAS_SECRET,
        ZENDESK_API_URL=f"http://agent%40shop.example%2Ftoken:zd-token@127.0.0.1:{port}",
    )
    db = Database.from_url(any_db_url)
    runtime = build(settings, db=db, processor=SandboxProcessor(db))
    harness = Channels(runtime, mail, helpdesk)
    harness.publish()
    yield harness
    db.dispose()


# ---------------------------------------------------------------- PostgreSQL: a customer's key


@contextmanager
def open_write(runtime: Runtime, lock_timeout: str = "2s") -> Iterator[Session]:
    """A write transaction left open (as an intake's is while it captures), waiting for a
    lock at most `lock_timeout`."""
    with runtime.db.write() as session:
        session.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
        yield session
