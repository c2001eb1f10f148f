"""Evidence: photos, receipts and links a customer sends with a request.

Files live outside the database, in a folder, each sealed (Fernet) under the data key of the
customer who sent it, like their other fields: destroying the key at an erasure makes every
copy of the file unreadable (a backup of the folder, a snapshot). A file's name is a MAC of
its SHA-256 under that key, so the same photo sent twice by one customer is stored once, the
name tells nothing about the content, and nothing is shared across customers. The case keeps
the hash, the stored name, the sniffed type and the size in clear (what the policy counts needs
no key); what the customer chose, a link's URL and a file's own name, is sealed on the item
under their key (the same `c1.` token as their other fields) and opened for those who may
read it (`shown`). The type is decided by the file's first bytes.
Evidence starts as the customer's word (`customer_input`) and becomes a `verified_document`
only when a person marks it checked.

Files stored by earlier versions are plaintext named by their SHA-256 (their item has no
`file`); they are read as they are and deleted by an erasure like the others. Items written
by earlier versions hold their URL in plain text: `shown` reads both layouts.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Text, cast, select
from sqlmodel import col

from refund_desk.cases.advisory import ERASED
from refund_desk.cases.errors import EvidenceRefused, InvalidRequest, NotFound
from refund_desk.cases.ports import Provenance
from refund_desk.cases.rows import load_for_update
from refund_desk.crypto import (
    CUSTOMER_TOKEN,
    CustomerCipher,
    Vault,
    keyed_hash,
    lock_customer_key,
    same,
)
from refund_desk.jobs.queue import queue
from refund_desk.storage.audit import Actor
from refund_desk.storage.db import on_commit
from refund_desk.storage.models import Case

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.cases.desk import Desk

PERSONAL = ("url", "filename", "name")  # an item's parts the customer chose ("name": none yet)
MAX_BYTES = 10 * 1024 * 1024
MAX_FILES = 5
MAX_LINKS = 5
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_LINK = re.compile(r"https?://[^\s<>\"')\]]+", re.IGNORECASE)
MAX_FILENAME = 200
UNCLAIMED_JOB = "evidence.unclaimed"  # files written for a request: gone unless a case holds them
CLAIM_WITHIN = timedelta(hours=1)
SEALED = CUSTOMER_TOKEN + "."  # how a value sealed under the customer's key begins


def shown(
    vault: Vault | None, items: Iterable[dict[str, Any]] | None, *, session: Session | None = None
) -> list[dict[str, Any]]:
    """Evidence items as a person who may read them sees them: the customer's link and file
    name opened, ERASED once their key is gone, as stored when written before they were
    sealed. Without a vault those parts are left out (None)."""
    out = []
    for item in items or []:
        opened = dict(item)
        for key in PERSONAL:
            value = opened.get(key)
            if isinstance(value, str):
                opened[key] = (
                    None if vault is None else vault.unseal(value, session=session) or ERASED
                )
        out.append(opened)
    return out


def sniff(data: bytes) -> str | None:
    """The content type by magic bytes: PNG, JPEG, GIF, WebP or PDF; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    return None


@dataclass(frozen=True)
class Upload:
    """A checked file, still in memory: its bytes, sniffed type and hash."""

    data: bytes
    content_type: str
    sha256: str
    filename: str | None = None  # the name the customer gave the file, if any


def check_upload(data: bytes, *, name: str = "file", filename: str | None = None) -> Upload:
    """Size and type by content; raises InvalidRequest (field `evidence`) with a sentence.
    `name` is how an error calls the file; `filename` is the customer's own name for it."""
    if not data:
        raise InvalidRequest(
            "invalid_evidence", "An attachment is empty.", {"evidence": f"{name} is empty"}
        )
    if len(data) > MAX_BYTES:
        raise InvalidRequest(
            "invalid_evidence",
            "An attachment is too large.",
            {"evidence": f"{name} is over {MAX_BYTES // (1024 * 1024)} MB"},
        )
    kind = sniff(data)
    if kind is None:
        raise InvalidRequest(
            "invalid_evidence",
            "An attachment is not a photo or PDF.",
            {"evidence": f"{name} is not a PNG, JPEG, GIF, WebP or PDF file"},
        )
    return Upload(
        data=data,
        content_type=kind,
        sha256=hashlib.sha256(data).hexdigest(),
        filename=customer_filename(filename),
    )


def customer_filename(raw: str | None) -> str | None:
    """The last part of a sent file's name, without control characters, at most 200 long."""
    base = re.split(r"[/\\]", raw or "")[-1]
    cleaned = "".join(ch for ch in base if ch.isprintable()).strip()
    return cleaned[:MAX_FILENAME] or None


def links_in(text: str | None) -> list[str]:
    """Links the customer wrote (order pages, photo albums): evidence, shown as links."""
    seen: list[str] = []
    for url in _LINK.findall(text or ""):
        url = url.rstrip(".,;:!?")
        if url not in seen and len(url) <= 2000:
            seen.append(url)
    return seen[:MAX_LINKS]


class EvidenceStore:
    """Sealed files in one folder, named per customer; writes are atomic (temp, then rename)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", name):
            raise ValueError("not a stored evidence name")
        return self.directory / name

    def put(self, upload: Upload, cipher: CustomerCipher) -> str:
        """Store the file sealed under the customer's key; returns its stored name. A file
        already there is kept (one customer's same photo is stored once)."""
        name = sealed_name(cipher, upload.sha256)
        target = self.path(name)
        if target.exists():
            return name
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(cipher.seal(upload.data))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return name

    def read(
        self, item: dict[str, Any], vault: Vault, session: Session | None = None
    ) -> bytes | None:
        """The file of one evidence item, opened; None if it is gone or its customer erased."""
        name = stored_name(item)
        if name is None:
            return None
        path = self.path(name)
        if not path.exists():
            return None
        data = path.read_bytes()
        if "file" not in item:  # stored plaintext by an earlier version
            return data
        return vault.open(data, session=session)

    def delete(self, names: list[str]) -> int:
        removed = 0
        for name in names:
            path = self.path(name)
            if path.exists():
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def sealed_name(cipher: CustomerCipher, sha256: str) -> str:
    """The name of a file sealed under `cipher`: a MAC of its hash under the customer's key."""
    return cipher.name("evidence", sha256)


def stored_name(item: dict[str, Any]) -> str | None:
    """The name of an item's file in the folder (its hash for a file of an earlier version)."""
    if item.get("kind") != "file":
        return None
    name = item.get("file") or item.get("sha256")
    return str(name) if name else None


@dataclass(frozen=True)
class Stored:
    """Uploads already in the folder, sealed under the customer's key as it was then."""

    store: EvidenceStore
    uploads: list[Upload]
    names: dict[str, str]  # sha256 -> stored name
    email_hash: str
    # Every name this request wrote (or found there): what a refusal lets go of (`release`).
    written: set[str] = field(default_factory=set)


def store_files(desk: Desk, store: EvidenceStore, email_hash: str, uploads: list[Upload]) -> Stored:
    """Seal and write the files before the case's transaction, in a short one holding the
    customer's key row (shared on PostgreSQL; SQLite's writer): an erasure waits for its
    commit, so a key it destroyed never seals a file. It also commits the job that deletes the
    files unless a case takes them (`customers/unclaimed.py`); if it fails, the files it wrote
    are deleted at once."""
    if not uploads:
        return Stored(store, [], {}, email_hash)
    written: list[str] = []
    try:
        with desk.db.write() as session:
            cipher = desk.vault.for_customer(session, email_hash)
            names = {u.sha256: sealed_name(cipher, u.sha256) for u in uploads}
            queue(
                session,
                kind=UNCLAIMED_JOB,
                payload={"customer": email_hash, "files": sorted(set(names.values()))},
                due_at=desk.now() + CLAIM_WITHIN,
            )
            for upload in uploads:
                name = names[upload.sha256]
                if not store.path(name).exists():
                    written.append(name)
                store.put(upload, cipher)
    except BaseException:
        store.delete(written)
        raise
    return Stored(store, list(uploads), names, email_hash, set(names.values()))


def unreferenced(
    session: Session, names: Iterable[str], *, customer: str | None = None
) -> list[str]:
    """Of `names`, the files no case with personal data refers to (one customer's cases may
    share one), sorted. `customer` (an email hash) narrows the search to that customer's
    cases: enough for sealed files, whose names no other customer's key makes."""
    free = []
    for name in sorted(set(names)):
        query = select(col(Case.evidence)).where(
            col(Case.erased_at).is_(None), cast(col(Case.evidence), Text).like(f"%{name}%")
        )
        if customer is not None:
            query = query.where(col(Case.email_hash) == customer)
        holders = session.scalars(query).all()
        if not any(stored_name(item) == name for items in holders for item in items or []):
            free.append(name)
    return free


def discard(desk: Desk, store: EvidenceStore, customer: str | None, names: Iterable[str]) -> int:
    """Delete those of one customer's files (`customer`: their email hash) that none of their
    cases refers to; how many. Every deletion of evidence files goes through here, reading the
    references and deleting while holding the customer's key row, which `attach` also holds
    while it takes a file into a case: a file a committed case refers to is never deleted.
    `customer` None (a job of an earlier version): every case is searched, no key row held."""
    names = set(names)
    if not names:
        return 0
    with desk.db.write() as session:
        if customer is not None:
            lock_customer_key(session, customer)
        # Deleted before the lock is let go: a capture waiting for it then finds them gone.
        return store.delete(unreferenced(session, names, customer=customer))


# ---------------------------------------------------------------- on the case


def sealed_copy(cipher: CustomerCipher, items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Items for another case of the same customer (an appeal carries its first case's), with
    what an earlier version left plain sealed under `cipher`: a new row holds no plain link."""
    out = []
    for item in items or []:
        copy = dict(item)
        for key in PERSONAL:
            value = copy.get(key)
            if isinstance(value, str) and value != ERASED and not value.startswith(SEALED):
                copy[key] = cipher.encrypt(value)
        out.append(copy)
    return out


def attach(
    desk: Desk,
    session: Session,
    case: Case,
    *,
    files: Stored | None,
    links: list[str],
    source: str,
    actor: Actor,
    base_url: str,
) -> None:
    """Put evidence on a case in the caller's transaction (files are already stored).

    Each file gets a signed view link under `base_url`, so the Slack card can show it.
    """
    uploads = files.uploads if files else []
    if not uploads and not links:
        return
    # The key row, locked: a refusal's or a sweep's deletion of unclaimed files waits for
    # this transaction, or ran before it; then `put` writes a file it deleted again. Under
    # a key an erasure replaced since the files were sealed, `put` seals them anew.
    cipher = desk.vault.for_customer(session, case.email_hash)
    names = {u.sha256: files.store.put(u, cipher) for u in uploads} if files else {}
    if files:
        files.written.update(names.values())
        # Sealed under a key an erasure destroyed since: no case can refer to those copies,
        # so they go once this case (with the copies under the new key) has committed.
        replaced = sorted(set(files.names.values()) - set(names.values()))
        if replaced:
            store = files.store

            def delete_replaced() -> None:
                store.delete(replaced)

            on_commit(session, delete_replaced)
    items = list(case.evidence or [])
    known = {i.get("sha256") or i.get("url") for i in shown(desk.vault, items, session=session)}
    added: list[dict[str, Any]] = []
    given = {"source": source, "provenance": str(Provenance.customer_input), "checked_by": None}
    for upload in uploads:
        if upload.sha256 not in known:
            known.add(upload.sha256)
            item: dict[str, Any] = {
                "id": f"f{len(items) + len(added)}-{upload.sha256[:12]}",
                "kind": "file",
                "sha256": upload.sha256,
                "file": names[upload.sha256],
                "content_type": upload.content_type,
                "size": len(upload.data),
                **given,
            }
            if upload.filename:
                item["filename"] = cipher.encrypt(upload.filename)
            item["view_url"] = base_url.rstrip("/") + view_path(desk.secret, case.id, upload.sha256)
            added.append(item)
    for url in links:
        if url not in known:
            known.add(url)
            # the URL sealed, the id a MAC under the customer's key: a plain hash of a
            # guessable URL would confirm it long after the erasure
            added.append(
                {
                    "id": f"l{len(items) + len(added)}-{cipher.name('link', url)[:12]}",
                    "kind": "link",
                    "url": cipher.encrypt(url),
                    **given,
                }
            )
    if not added:
        return
    case.evidence = items + added
    session.add(case)
    desk.audit.append(
        session,
        action="evidence.attached",
        actor=actor,
        case_id=case.id,
        correlation_id=case.correlation_id,
        policy_version=case.policy_version,
        payload={
            "files": [
                {"sha256": i["sha256"], "type": i["content_type"], "size": i["size"]}
                for i in added
                if i["kind"] == "file"
            ],
            "links": sum(1 for i in added if i["kind"] == "link"),  # the URLs may be personal
        },
    )


def mark_checked(desk: Desk, *, case_id: str, evidence_id: str, user: str) -> dict[str, Any]:
    """A person looked at one piece of evidence: it becomes a verified document, on the record.

    Only the case's approvers (or managers) may vouch for evidence, since it can change what
    later re-checks see; the person who filed the case may not.
    """
    from refund_desk.cases.approvals import may_vouch

    with desk.db.write() as session:
        case = load_for_update(session, case_id)
        if not may_vouch(session, case, user, desk.directory):
            raise EvidenceRefused(
                "not_an_approver", "Only the case's approvers may mark its evidence checked."
            )
        items = [dict(i) for i in case.evidence or []]
        item = next((i for i in items if i.get("id") == evidence_id), None)
        if item is None:
            raise NotFound("evidence_not_found", "No such evidence on this case.")
        if item.get("provenance") == Provenance.verified_document:
            return item
        item["provenance"] = str(Provenance.verified_document)
        item["checked_by"] = user
        item["checked_at"] = desk.now().isoformat()
        case.evidence = items
        case.updated_at = desk.now()
        session.add(case)
        desk.audit.append(
            session,
            action="evidence.checked",
            actor=Actor("human", user),
            case_id=case.id,
            correlation_id=case.correlation_id,
            policy_version=case.policy_version,
            payload={
                "evidence_id": evidence_id,
                "kind": item.get("kind"),
                "sha256": item.get("sha256"),
            },
        )
        return item


# ---------------------------------------------------------------- links to view a file


def view_signature(secret: str, case_id: str, sha256: str) -> str:
    return keyed_hash(secret, "evidence-links", f"{case_id}/{sha256}")[:32]


def view_path(secret: str, case_id: str, sha256: str) -> str:
    """A capability path for one file of one case: what the card links to."""
    return f"/evidence/{case_id}/{sha256}?sig={view_signature(secret, case_id, sha256)}"


def view_allowed(secret: str, case_id: str, sha256: str, sig: str) -> bool:
    return same(view_signature(secret, case_id, sha256), sig)
