"""Keys derived from the deployment secret, field encryption, and keyed hashes.

One secret (`REFUND_DESK_SECRET`) feeds every key through HKDF with a distinct purpose, so a
leaked action-token key says nothing about the audit key, and rotating the secret rotates all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import Select, bindparam, select
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.storage.db import InsertIfNew
from refund_desk.storage.models import Case, CustomerKey

if TYPE_CHECKING:
    from refund_desk.storage.db import Database


@lru_cache(maxsize=64)
def derive_key(secret: str, purpose: str) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"refund-desk/v1", info=purpose.encode()
    ).derive(secret.encode())


def mac(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA256: the one MAC every token, link, CSRF field, webhook and record uses."""
    return hmac.new(key, data, hashlib.sha256).digest()


def same(given: str, expected: str) -> bool:
    """Compare a presented signature in constant time."""
    return hmac.compare_digest(given.encode(), expected.encode())


def keyed_hash(secret: str, purpose: str, value: str) -> str:
    """A hex MAC of `value` under the key derived for `purpose` (tokens, links, CSRF, audit)."""
    return mac(derive_key(secret, purpose), value.encode()).hex()


def normalize_email(email: str) -> str:
    return email.strip().lower()


CUSTOMER_TOKEN = "c1"  # c1.<email hash>.<key generation>.<Fernet token>


class CustomerCipher:
    """Encrypts one customer's fields and files under their own data key."""

    def __init__(self, email_hash: str, generation: int, key: bytes, wrapped: str = "") -> None:
        self.email_hash = email_hash
        self.generation = generation
        self.wrapped = wrapped  # the key as its row stores it
        self._prefix = f"{CUSTOMER_TOKEN}.{email_hash}.{generation}."
        self._key = key
        self._fernet = Fernet(key)

    def encrypt(self, value: str | None) -> str | None:
        return None if value is None else self.seal(value.encode()).decode()

    def seal(self, data: bytes) -> bytes:
        """Bytes (a file) as a customer token: readable only while the key lives."""
        return self._prefix.encode() + self._fernet.encrypt(data)

    def name(self, purpose: str, value: str) -> str:
        """A hex name for `value` that only this key makes (a file's name in a folder): it
        matches within the customer, never across customers or after an erasure."""
        return mac(self._key, f"{purpose}/{value}".encode()).hex()


class Vault:
    """Encrypts personal fields at rest and makes blind indexes for matching them.

    A customer's fields are encrypted under a data key of their own (`for_customer`), kept
    in `customer_keys` wrapped by a key derived from the deployment secret. Erasing the
    customer destroys that key: every copy of their fields, in this database and in every
    backup, is unreadable from then on, and `decrypt` answers None for it. Fields written
    before per-customer keys (no `c1.` prefix) use the deployment's field key.
    """

    def __init__(self, secret: str, db: Database | None = None) -> None:
        self._secret = secret
        self._db = db
        self._fernet = Fernet(base64.urlsafe_b64encode(derive_key(secret, "field-encryption")))
        self._wrap = Fernet(base64.urlsafe_b64encode(derive_key(secret, "customer-keys")))

    def encrypt(self, value: str | None) -> str | None:
        return None if value is None else self._fernet.encrypt(value.encode()).decode()

    def decrypt(self, token: str | None, *, session: Session | None = None) -> str | None:
        """The plain value; None for None, an erased customer's field, or an erased column."""
        if token is None or token == "":
            return None
        if token.startswith(CUSTOMER_TOKEN + "."):
            plain = self._decrypt_customer(token.encode(), session)
            return None if plain is None else plain.decode()
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken as exc:  # a different secret, or a tampered column
            raise ValueError("cannot decrypt a stored field: wrong REFUND_DESK_SECRET?") from exc

    def unseal(self, value: str, *, session: Session | None = None) -> str | None:
        """A value the customer gave that is stored sealed under their key (a `c1.` token),
        or as it came when written before such values were sealed; None once the key is
        gone. Unlike `decrypt`, plain text is the earlier layout, not the deployment key's."""
        if not value.startswith(CUSTOMER_TOKEN + "."):
            return value
        return self.decrypt(value, session=session)

    def for_customer(self, session: Session, email_hash: str) -> CustomerCipher:
        """The customer's live data key, made in the caller's transaction if they have none
        (or had theirs destroyed by an erasure: a returning customer starts afresh). Fields
        are encrypted with it inside that transaction, never with a key kept from before.

        A live key is held with a shared lock (PostgreSQL; SQLite's one writer excludes all):
        an erasure, which locks the row for update first, waits for every transaction using
        the key, and those do not wait for each other. A new customer's key is inserted; only
        an erased one is locked for update (and replaced)."""
        row: CustomerKey | _NewKey | None = _held_if_live(
            session, _SHARE_LIVE_KEY, {"email_hash": email_hash}
        )
        if row is None:
            row = self._made_live(session, email_hash)
        assert row.key_enc is not None
        key = self._wrap.decrypt(row.key_enc.encode())
        return CustomerCipher(email_hash, row.generation, key, row.key_enc)

    def _made_live(self, session: Session, email_hash: str) -> CustomerKey | _NewKey:
        """The customer's key row with a live key, made here if they have none: inserted by
        this transaction (a new customer), else read as it is once whoever holds it for update
        is done (a live key under a shared lock; an erased one locked for update, and a new
        key in a new generation)."""
        key_enc = self._new_wrapped_key()
        values = {"email_hash": email_hash, "generation": 1, "key_enc": key_enc,
                  "created_at": clock.now()}  # fmt: skip
        if _INSERT_KEY.into(session, values):
            return _NewKey(1, key_enc)
        shared = _share_live_key_waiting(session, email_hash)
        if shared is not None:
            return shared
        row = _lock_key(session, email_hash)
        assert row is not None
        if row.key_enc is None:  # erased before: a new key, a new generation
            row.key_enc, row.generation, row.erased_at = key_enc, row.generation + 1, None
            session.flush()
        return row

    def _new_wrapped_key(self) -> str:
        return self._wrap.encrypt(Fernet.generate_key()).decode()

    def open(self, sealed: bytes, *, session: Session | None = None) -> bytes | None:
        """What `CustomerCipher.seal` sealed; None once the customer's key is destroyed."""
        return self._decrypt_customer(sealed, session)

    def _decrypt_customer(self, token: bytes, session: Session | None) -> bytes | None:
        try:
            _, email_hash, generation, body = token.split(b".", 3)
        except ValueError as exc:
            raise ValueError("cannot decrypt a stored field: a malformed customer token") from exc
        row = _read_key(session, self._db, email_hash.decode())
        if row is None or row.key_enc is None or str(row.generation) != generation.decode():
            return None  # the customer's key was destroyed: erased
        try:
            key = self._wrap.decrypt(row.key_enc.encode())
            return Fernet(key).decrypt(body)
        except InvalidToken as exc:
            raise ValueError("cannot decrypt a stored field: wrong REFUND_DESK_SECRET?") from exc

    def email_hash(self, email: str) -> str:
        return keyed_hash(self._secret, "email-index", normalize_email(email))


def destroy_customer_key(session: Session, email_hash: str, now: datetime) -> bool:
    """Erase: the data key is gone, so is every field encrypted under it. True if one was."""
    row = _lock_key(session, email_hash)
    if row is None or row.key_enc is None:
        return False
    row.key_enc, row.erased_at = None, now
    # Written now, not at the commit: a later read of the row afresh (`populate_existing`,
    # as every locking read here is) inside `no_autoflush` would otherwise take the key back.
    session.flush()
    return True


def purge_destroyed_keys(db: Database) -> None:
    """Physically remove the old versions of destroyed keys, outside any transaction: a
    destroyed key's old row version is the one copy that still decrypts (its wrapping key
    comes from the deployment secret, which lives on). Raises PurgeBusy when it could not
    finish now."""
    db.purge_old_versions(CustomerKey.__tablename__)


def lock_customer_key(session: Session, email_hash: str) -> CustomerKey | None:
    """The customer's key row, locked (PostgreSQL) until the caller's transaction ends: an
    intake that is using the key commits first, or waits."""
    return _lock_key(session, email_hash)


# Built once, read afresh under the lock; FOR UPDATE / FOR SHARE render nothing on SQLite,
# whose writer BEGIN IMMEDIATE took.
_KEY_ROW = (
    select(CustomerKey)
    .where(col(CustomerKey.email_hash) == bindparam("email_hash"))
    .execution_options(populate_existing=True)
)
_LOCK_KEY = _KEY_ROW.with_for_update()
_SHARE_KEY = _KEY_ROW.with_for_update(read=True)
_SHARE_LIVE_KEY = _KEY_ROW.where(col(CustomerKey.key_enc).is_not(None)).with_for_update(
    read=True, skip_locked=True
)
_EMAIL_HASH_OF_CASE = select(col(Case.email_hash)).where(col(Case.id) == bindparam("case_id"))
_SHARE_KEY_OF_CASE = (
    select(CustomerKey)
    .where(
        col(CustomerKey.email_hash) == _EMAIL_HASH_OF_CASE.scalar_subquery(),
        col(CustomerKey.key_enc).is_not(None),
    )
    .execution_options(populate_existing=True)
    .with_for_update(read=True, skip_locked=True, of=CustomerKey)
)
_KEYS = CustomerKey.__table__  # type: ignore[attr-defined]
_INSERT_KEY = InsertIfNew(_KEYS, _KEYS.c.email_hash)  # on the table: no autoflush, no ORM


@dataclass(frozen=True)
class _NewKey:
    """A key row this transaction inserted, as `for_customer` reads it."""

    generation: int
    key_enc: str


def _share_live_key_waiting(session: Session, email_hash: str) -> CustomerKey | None:
    """The key row under a shared lock, waiting for whoever holds it for update, if its key is
    then live; else None with no lock left behind. A live key is held shared, as by the first
    look, so one customer's transactions still do not queue behind each other."""
    return _held_if_live(session, _SHARE_KEY, {"email_hash": email_hash})


def _held_if_live(
    session: Session, look: Select[CustomerKey], params: dict[str, str]
) -> CustomerKey | None:
    """The key row `look` finds under a shared lock, if its key is live; else None with no
    lock left behind. The look is made in a savepoint, rolled back unless the key is live:
    PostgreSQL keeps the lock on a row it locked and then found no longer matching (an
    erasure committed between the statement's snapshot and the lock, the row then re-read),
    and a shared lock left on an erased row makes every intake that needs to replace the key
    wait on the others' shared locks for its update (a deadlock)."""
    savepoint = session.begin_nested()
    row = session.scalars(look, params).first()
    if row is not None and row.key_enc is not None:
        savepoint.commit()  # the shared lock stays until the transaction ends
        return row
    savepoint.rollback()  # and the lock with it (PostgreSQL releases a savepoint's locks)
    return None


def hold_key_of_case(session: Session, case_id: str) -> None:
    """Hold the live key of the case's customer under a shared lock, before the case's row is
    locked. An erasure locks the key row, then the customer's cases; a transaction that locked
    a case and then needed its customer's key (to seal advice under it) would wait for the
    erasure while the erasure waited for it. With the key held first, the erasure waits for
    this transaction, or this one for the erasure's commit (and then finds the case erased).
    A missing or erased key is not held."""
    if _held_if_live(session, _SHARE_KEY_OF_CASE, {"case_id": case_id}) is None:
        # held for update (an erasure under way), erased, or no case
        email_hash = session.connection().scalar(_EMAIL_HASH_OF_CASE, {"case_id": case_id})
        if email_hash:
            _share_live_key_waiting(session, email_hash)


def _lock_key(session: Session, email_hash: str) -> CustomerKey | None:
    return session.scalars(_LOCK_KEY, {"email_hash": email_hash}).first()


def _read_key(session: Session | None, db: Database | None, email_hash: str) -> CustomerKey | None:
    if session is not None:
        return session.get(CustomerKey, email_hash)
    if db is None:
        raise ValueError("a customer's field needs the database to be read")
    with db.read() as own:
        return own.get(CustomerKey, email_hash)
