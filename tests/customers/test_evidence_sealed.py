"""Evidence links and the names customers give their files are sealed on the case row under
the customer's key: shown in plain text to those who may read the case, "[erased]" once the
key is gone, in every copy of the row (an old row version, a backup) at once. Items written
before they were sealed read as they are, and an erasure blanks them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from refund_desk.cases import evidence
from refund_desk.cases.advisory import ERASED
from refund_desk.cases.evidence import shown
from refund_desk.storage.models import Case
from tests.customers.conftest import PNG, Channels, raw_email
from tests.customers.test_erasure import _erase, _file_bytes
from tests.customers.test_web_form import _fields
from tests.helpers import CUSTOMER

ALBUM = "https://photos.example/zanzibar-album-77"
FILENAME = "lovelace-vase-receipt.png"


def _stored_json(channels: Channels, case_id: str) -> str:
    """The case row's evidence column as the database holds it."""
    with channels.runtime.db.engine.connect() as conn:
        value = conn.scalar(
            text("SELECT CAST(evidence AS TEXT) FROM cases WHERE id = :id"), {"id": case_id}
        )
    return str(value)


def _cases_heap(channels: Channels) -> bytes:
    """PostgreSQL: the cases table's heap file as on disk, after a checkpoint."""
    with channels.runtime.db.engine.connect() as conn:
        if not conn.scalar(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")):
            pytest.skip("reading the heap file needs a superuser")
        conn.execute(text("CHECKPOINT"))
        path = conn.scalar(text("SELECT pg_relation_filepath('cases')"))
        return bytes(conn.scalar(text("SELECT pg_read_binary_file(:p)"), {"p": path}))


def _form_case(channels: Channels) -> str:
    payment = channels.payment("30.00")
    response = channels.submit_form(
        _fields(payment, message=f"The vase arrived broken. More photos: {ALBUM}"),
        files=[(FILENAME, PNG)],
    )
    assert response.status_code == 201, response.text
    return str(response.headers["X-Refund-Desk-Case"])


def test_links_and_file_names_are_sealed_shown_to_readers_and_gone_after_the_erasure(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case_id = _form_case(channels)
    runtime = channels.runtime

    # Stored: only tokens (on PostgreSQL too, before any erasure); the rest in clear.
    stored = _stored_json(channels, case_id)
    assert ALBUM not in stored and "zanzibar" not in stored and FILENAME not in stored
    assert "photos.example" not in stored and "receipt" not in stored
    items = json.loads(stored)
    file, link = sorted(items, key=lambda i: str(i["kind"]))
    assert file["filename"].startswith("c1.") and link["url"].startswith("c1.")
    assert file["content_type"] == "image/png" and file["size"] == len(PNG)
    assert link["provenance"] == "customer_input" and link["id"].startswith("l")
    if runtime.settings.is_sqlite:  # nowhere in the file, the write-ahead log included
        assert b"zanzibar-album" not in _file_bytes(channels)
        assert FILENAME.encode() not in _file_bytes(channels)

    # Shown in plain text to those who may read the case: the API, the file's own link.
    view = channels.get(case_id)
    opened = {i["kind"]: i for i in view["evidence"]}
    assert opened["link"]["url"] == ALBUM and opened["file"]["filename"] == FILENAME
    assert view["facts"]["evidence"] == {"count": 2, "checked": 0}
    served = channels.client.get("/evidence/" + str(file["view_url"]).split("/evidence/", 1)[1])
    assert served.status_code == 200 and served.content == PNG
    assert FILENAME in served.headers["content-disposition"]
    listed = channels.client.get(
        "/api/v1/cases", headers={"Authorization": f"Bearer {channels.key}"}
    ).json()
    assert ALBUM in json.dumps(listed)

    _erase(channels, CUSTOMER, tmp_path, monkeypatch)

    # The copy taken before the erasure opens to nothing; the row says erased.
    assert [(i.get("url"), i.get("filename")) for i in shown(runtime.desk.vault, items)] \
        == [(None, ERASED), (ERASED, None)]  # fmt: skip
    after = channels.get(case_id)
    assert ALBUM not in json.dumps(after) and FILENAME not in json.dumps(after)
    assert {i["kind"]: i.get("url") or i.get("filename") for i in after["evidence"]} == {
        "link": ERASED,
        "file": ERASED,
    }
    assert after["facts"]["evidence"] == {"count": 2, "checked": 0}
    stored = _stored_json(channels, case_id)
    assert "c1." not in stored and ALBUM not in stored
    # PostgreSQL: the table's heap, the erased row's old version (a dead tuple) included.
    data = _file_bytes(channels) if runtime.settings.is_sqlite else _cases_heap(channels)
    assert b"zanzibar-album" not in data and FILENAME.encode() not in data


def test_items_written_before_links_were_sealed_are_read_and_erased(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier version stored the URL as it came: shown as it is, blanked by an erasure."""
    case_id = _form_case(channels)
    runtime = channels.runtime
    old = "https://photos.example/plain-zanzibar-older"
    with runtime.db.write() as session:
        case = session.get(Case, case_id)
        assert case is not None
        items = [dict(i) for i in case.evidence or []]
        for item in items:
            if item["kind"] == "link":
                item["url"] = old
        case.evidence = items
        session.add(case)
    assert old in _stored_json(channels, case_id)
    assert {i["kind"]: i.get("url") for i in channels.get(case_id)["evidence"]}["link"] == old

    _erase(channels, CUSTOMER, tmp_path, monkeypatch)

    assert old not in _stored_json(channels, case_id)
    assert old not in json.dumps(channels.get(case_id))
    if runtime.settings.is_sqlite:
        assert b"plain-zanzibar-older" not in _file_bytes(channels)


def test_a_reply_with_the_same_link_adds_no_second_item(channels: Channels) -> None:
    """Links are compared opened: a sealed link is the same link when it comes again."""
    payment = channels.payment("900.00")
    first = channels.post_email(
        raw_email(subject=f"Refund {payment}", text=f"Amount: 600.00\nSee {ALBUM}")
    ).json()
    case_id = first["case"]
    from tests.customers.test_customer_tell import _act

    _act(channels, case_id, "deny", "U0FIN1", reason="We need a photo of the damage.")
    channels.sweep()
    [outcome] = channels.mail.inbox.to(CUSTOMER)
    reply = raw_email(
        subject=str(outcome["Subject"]),
        text=f"Again: {ALBUM} and https://photos.example/second",
        message_id="<m2@example.com>",
        In_Reply_To=str(outcome["Message-ID"]),
    )
    assert channels.post_email(reply).status_code == 200
    urls = [i["url"] for i in channels.get(case_id)["evidence"]]
    assert urls == [ALBUM, "https://photos.example/second"]
    assert "photos.example" not in _stored_json(channels, case_id)


def test_the_customers_file_name_is_kept_without_its_path() -> None:
    assert evidence.customer_filename("C:\\Users\\ada\\My receipt.pdf") == "My receipt.pdf"
    assert evidence.customer_filename("../../etc/passwd") == "passwd"
    assert evidence.customer_filename("a\x00b\nc.png") == "abc.png"
    assert evidence.customer_filename("   ") is None and evidence.customer_filename(None) is None
    assert len(evidence.customer_filename("x" * 500) or "") == evidence.MAX_FILENAME


def test_an_appeal_carries_the_first_cases_links_sealed_and_keeps_its_own(
    channels: Channels,
) -> None:
    """The appeal's row holds no plain link, not even one its first case kept from an earlier
    version, and the links in the appeal's own message are on it too."""
    from tests.customers.test_appeal import _denied_with_link, _post

    first, path = _denied_with_link(channels)
    old = "https://photos.example/plain-zanzibar-first"
    with channels.runtime.db.write() as session:
        case = session.get(Case, first)
        assert case is not None
        case.evidence = [
            {"id": "l0-0123456789ab", "kind": "link", "url": old, "source": "web_form",
             "provenance": "customer_input", "checked_by": None}
        ]  # fmt: skip
        session.add(case)
    response = _post(channels, path, message=f"It was broken, see {ALBUM} and {old}")
    assert response.status_code == 201, response.text
    appeal = response.headers["X-Refund-Desk-Case"]
    stored = _stored_json(channels, appeal)
    assert "photos.example" not in stored and "zanzibar" not in stored
    assert [i["url"] for i in channels.get(appeal)["evidence"]] == [old, ALBUM]
