"""Keys derived from the deployment secret, field encryption, and keyed hashes.

One secret (`REFUND_DESK_SECRET`) feeds every key through HKDF with a distinct purpose, so a
leaked action-token key says nothing about the audit key, and rotating the secret rotates all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm.util import identity_key
from sqlmodel import Session, col

from refund_desk import clock
from refund_desk.storage import direct_rows
from refund_desk.storage.db import InsertIfNew, held_get, memo, plain
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
CIPHERS_KEPT = 1024  # customers whose live key a Vault keeps in memory (`ready_cipher`)
# How long a customer's key stays in a process's memory after a commit proved it live. An
# erasure in another process cannot reach this memory: the key leaves it at the latest this
# long after it was last proved, checked at each use and at every sweep (`forget_expired`).
KEY_MEMORY_SECONDS = 60.0


class CustomerCipher:
    """Encrypts one customer's fields and files under their own data key."""

    def __init__(
        self,
        email_hash: str,
        generation: int,
        key: bytes,
        *,
        wrapped: str = "",
        fresh: bool = False,
    ) -> None:
        self.email_hash = email_hash
        self.generation = generation
        # The key as stored (wrapped): what the key row must still hold for this cipher's
        # tokens to be readable. `fresh`: made by `Vault.ready_cipher`, never stored yet.
        self.wrapped = wrapped
        self.fresh = fresh
        # When a write transaction last proved this key live (`Vault.for_customer`), in
        # monotonic seconds: its time in memory counts from then, not from after the commit.
        self.proved_at: float | None = None
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
        # Customers' live keys as last proved by a write transaction (`ready_cipher`), least
        # recently remembered first, each with when it was proved (monotonic seconds).
        self._ciphers: OrderedDict[str, tuple[CustomerCipher, float]] = OrderedDict()
        self._ciphers_lock = threading.Lock()

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

    def for_customer(
        self, session: Session, email_hash: str, *, ready: CustomerCipher | None = None
    ) -> CustomerCipher:
        """The customer's live data key, made in the caller's transaction if they have none
        (or had theirs destroyed by an erasure: a returning customer starts afresh).

        `ready` is a cipher prepared before the transaction (`ready_cipher`): it is returned
        itself only if the key row, read (and on PostgreSQL locked) here, holds exactly its
        key, or if a key had to be made and `ready` is a fresh one (then it is the key stored).
        Anything else (the customer was erased meanwhile, or a concurrent first intake stored
        another key) gives the cipher of the row as it is now, and the caller's tokens made
        with `ready` must be made again.

        On PostgreSQL a live key is held with a shared lock: an erasure (which locks the row
        for update first) waits for every transaction using the key, and those do not wait
        for each other. A new customer's key is inserted; only an erased one is locked for
        update (and replaced)."""
        fresh = ready is not None and ready.fresh
        # A customer this process knows no key of is most often new: on PostgreSQL the
        # insert comes first then (`_made_live`), one statement instead of a look and the
        # insert; one it knows is looked at first.
        row: CustomerKey | NewKey | None = None
        if not (fresh and _on_postgresql(session)):
            row = _share_live_key(session, email_hash)
        if row is None:
            row = self._made_live(session, email_hash, ready)
        proved_at = time.monotonic()
        if (
            ready is not None
            and ready.generation == row.generation
            and ready.wrapped == row.key_enc
        ):
            ready.proved_at = proved_at
            return ready
        assert row.key_enc is not None
        cipher = CustomerCipher(
            email_hash,
            row.generation,
            self._wrap.decrypt(row.key_enc.encode()),
            wrapped=row.key_enc,
        )
        cipher.proved_at = proved_at
        return cipher

    def _made_live(
        self, session: Session, email_hash: str, ready: CustomerCipher | None
    ) -> CustomerKey | NewKey:
        """The customer's key row with a live key, made here if they have none: inserted by
        this transaction (a new customer), else read as it is once whoever holds it for update
        is done (a live key under a shared lock; an erased one locked for update, and a new
        key in a new generation).

        The insert comes first where the customer is most likely new, and a new customer's
        key is then one statement: on PostgreSQL (the shared look found no live key, or none
        was made: this process knew no key of theirs, `ready` is fresh, and a live key the
        insert finds is then looked at as the shared look would), and on SQLite when `ready`
        is fresh. Otherwise (SQLite, one writer) the row is read first, as a returning
        customer's is: once per transaction, as its writer excludes every other change to it
        (a field decrypted earlier in the transaction read it already)."""
        fresh = ready if ready is not None and ready.fresh else None
        postgresql = _on_postgresql(session)
        insert_first = postgresql or fresh is not None
        row = None if insert_first else _key_row(session, email_hash)
        if row is not None and row.key_enc is None and row not in session:
            row = _lock_key(session, email_hash)  # erased, read as a direct row: the ORM's
        if row is None:
            made = fresh.wrapped if fresh is not None and fresh.generation == 1 else None
            inserted = _insert_key(session, email_hash, made or self._new_wrapped_key())
            if inserted is not None:
                return inserted
            if postgresql:
                # A live key this process did not know (the insert came first: no look yet),
                # or the row was held for update when the look skipped it, or is erased.
                shared = (
                    _share_live_key(session, email_hash) if fresh is not None else None
                ) or _share_live_key_waiting(session, email_hash)
                if shared is not None:
                    return shared
            row = _lock_key(session, email_hash)
            assert row is not None
        if row.key_enc is None:  # erased before: a new key, a new generation
            generation = row.generation + 1
            if fresh is not None and fresh.generation == generation:
                row.key_enc = fresh.wrapped
            else:
                row.key_enc = self._new_wrapped_key()
            row.generation = generation
            row.erased_at = None
            session.add(row)
            session.flush()
            direct_rows.forget(session, CustomerKey, email_hash)  # read as it is now
        return row

    def ready_cipher(self, email_hash: str) -> CustomerCipher:
        """The customer's key as this process last used it, for encrypting before the write
        transaction; a fresh key (not stored) if it has none in memory. Never trust it alone:
        the write transaction passes it to `for_customer`, which proves the key row still
        holds it, so a key an erasure destroyed meanwhile (here or in another process) is
        never used, and a fresh key is stored only if the customer has no live one."""
        with self._ciphers_lock:
            known = self._ciphers.get(email_hash)
            if known is not None:
                cipher, proved_at = known
                if time.monotonic() - proved_at < KEY_MEMORY_SECONDS:
                    return cipher
                del self._ciphers[email_hash]
        key = Fernet.generate_key()
        wrapped = self._wrap.encrypt(key).decode()
        return CustomerCipher(email_hash, 1, key, wrapped=wrapped, fresh=True)

    def remember(self, cipher: CustomerCipher) -> None:
        """After a commit that proved `cipher` is the customer's live key: the next intake of
        theirs encrypts before its transaction (a bounded number of customers is kept)."""
        stored = CustomerCipher(
            cipher.email_hash, cipher.generation, cipher._key, wrapped=cipher.wrapped
        )
        now = time.monotonic()
        proved_at = min(now, cipher.proved_at) if cipher.proved_at is not None else now
        with self._ciphers_lock:
            self._ciphers[cipher.email_hash] = (stored, proved_at)
            self._ciphers.move_to_end(cipher.email_hash)
            while len(self._ciphers) > CIPHERS_KEPT:
                self._ciphers.popitem(last=False)
        self.forget_expired(now)

    def forget(self, email_hash: str) -> None:
        """The customer's key is being destroyed: it leaves this process's memory too."""
        with self._ciphers_lock:
            self._ciphers.pop(email_hash, None)

    def forget_expired(self, now: float | None = None) -> int:
        """Drop the keys proved more than `KEY_MEMORY_SECONDS` ago (an erasure elsewhere may
        have destroyed them); how many. Called at every sweep, so an idle process forgets too."""
        now = time.monotonic() if now is None else now
        dropped = 0
        with self._ciphers_lock:  # at most CIPHERS_KEPT entries, so each is looked at
            for email_hash, (_, proved_at) in list(self._ciphers.items()):
                if now - proved_at >= KEY_MEMORY_SECONDS:
                    del self._ciphers[email_hash]
                    dropped += 1
        return dropped

    def remembers(self, email_hash: str) -> bool:
        """Whether this process holds the customer's key in memory now."""
        with self._ciphers_lock:
            return email_hash in self._ciphers

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
    session.add(row)
    # Written now, not at the commit: a later read of the row afresh (`populate_existing`,
    # as every locking read here is) inside `no_autoflush` would otherwise take the key back.
    session.flush()
    direct_rows.forget(session, CustomerKey, email_hash)  # the ORM's row, changed, is read
    return True


PURGE_LOCK_TIMEOUT = "2s"
_KEPT = re.compile(r"(\d+) dead row versions cannot be removed yet")


class PurgeBusy(Exception):
    """The key table could not be rewritten now (readers, a long transaction): try later."""


def purge_destroyed_keys(db: Database) -> None:
    """Physically remove the old versions of destroyed keys, outside any transaction.

    A destroyed key's old row version is the one copy that still decrypts (its wrapping key
    comes from the deployment secret, which lives on). PostgreSQL keeps it as a dead tuple,
    and plain `VACUUM` frees the tuple without overwriting its bytes (measured: they stay in
    the page's free space), so the key table is rewritten (`VACUUM FULL`, one short exclusive
    lock on a table of one row per customer; `lock_timeout` keeps it from queueing in front of
    intakes behind a long transaction). SQLite overwrites freed space (`secure_delete`) but
    keeps old pages in its write-ahead log until a checkpoint, folded in here.
    Raises PurgeBusy when it could not finish now.
    """
    table = CustomerKey.__tablename__
    if db.is_sqlite:
        raw = db.engine.raw_connection()
        try:
            busy = raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            raw.close()
        if busy is None or busy[0]:
            raise PurgeBusy("readers kept the write-ahead log from being folded in")
        return
    kept: list[int] = []

    def tally(notice: Any) -> None:  # VERBOSE says how many dead versions it had to keep
        found = _KEPT.search(str(notice.message_detail or ""))
        if found:
            kept.append(int(found.group(1)))

    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        driver = conn.connection.driver_connection
        driver.add_notice_handler(tally)  # type: ignore[union-attr]
        try:
            conn.execute(text(f"SET lock_timeout = '{PURGE_LOCK_TIMEOUT}'"))
            conn.execute(text(f"VACUUM (FULL, VERBOSE) {table}"))
        except OperationalError as exc:
            raise PurgeBusy(f"could not rewrite {table}: {exc.orig}") from exc
        finally:
            driver.remove_notice_handler(tally)  # type: ignore[union-attr]
            conn.execute(text("RESET lock_timeout"))
    if any(kept):  # a transaction older than the erasure still sees them
        raise PurgeBusy(f"{sum(kept)} old row versions of {table} are still in use")


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
_SHARED = "shared keys"  # memo: email hash -> key row this transaction holds FOR SHARE
_KEYS = CustomerKey.__table__  # type: ignore[attr-defined]
_INSERT_KEY = InsertIfNew(_KEYS, _KEYS.c.email_hash)  # on the table: no autoflush, no ORM


def _on_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _share_live_key(session: Session, email_hash: str) -> CustomerKey | None:
    """PostgreSQL: the customer's key row under a shared lock (FOR SHARE) if it holds a live
    key, else None, having waited for nothing and locked nothing: one round trip, no
    savepoint. A missing or erased row is not returned, so not locked; a row another
    transaction holds for update (an erasure, a discard of evidence, a new generation being
    made) is skipped (SKIP LOCKED): `_share_live_key_waiting` waits for it. SQLite: None
    (its writer, taken at BEGIN IMMEDIATE, already excludes all)."""
    if not _on_postgresql(session):
        return None
    held = memo(session, _SHARED).get(email_hash)
    if held is not None:  # held shared since `hold_key_of_case`: nobody changed it since
        return held
    return session.scalars(_SHARE_LIVE_KEY, {"email_hash": email_hash}).first()


def _share_live_key_waiting(session: Session, email_hash: str) -> CustomerKey | None:
    """PostgreSQL: the key row under a shared lock, waiting for whoever holds it for update,
    if its key is then live; else None with no lock left behind. The look is made in a
    savepoint, rolled back when the key is erased: a shared lock taken while waiting would
    stay on the erased row, and every intake that waited would then wait on the others'
    shared locks to make the new key (a deadlock). A live key is held shared, as by the first
    look, so one customer's transactions still do not queue behind each other."""
    look = session.begin_nested()
    row = session.scalars(_SHARE_KEY, {"email_hash": email_hash}).first()
    if row is not None and row.key_enc is not None:
        look.commit()  # the shared lock stays until the transaction ends
        return row
    look.rollback()  # and the shared lock with it (PostgreSQL releases a savepoint's locks)
    return None


def hold_key_of_case(session: Session, case_id: str) -> None:
    """PostgreSQL: hold the live key of the case's customer under a shared lock, before the
    case's row is locked. An erasure locks the key row, then the customer's cases; a
    transaction that locked a case and then needed its customer's key (to seal advice under
    it) would wait for the erasure while the erasure waited for it. With the key held first,
    the erasure waits for this transaction, or this one for the erasure's commit (and then
    finds the case erased). A missing or erased key is not held. SQLite: nothing (its writer,
    taken at BEGIN IMMEDIATE, already excludes all)."""
    if not _on_postgresql(session):
        return
    row = session.scalars(_SHARE_KEY_OF_CASE, {"case_id": case_id}).first()
    if row is None:  # held for update (an erasure under way), erased, or no case
        email_hash = plain(session).scalar(_EMAIL_HASH_OF_CASE, {"case_id": case_id})
        row = _share_live_key_waiting(session, email_hash) if email_hash else None
    if row is not None:
        memo(session, _SHARED)[row.email_hash] = row


def _lock_key(session: Session, email_hash: str) -> CustomerKey | None:
    return session.scalars(_LOCK_KEY, {"email_hash": email_hash}).first()


@dataclass(frozen=True)
class NewKey:
    """A key row this transaction inserted, as `for_customer` reads it (no ORM object)."""

    email_hash: str
    generation: int
    key_enc: str


def _insert_key(session: Session, email_hash: str, key_enc: str) -> NewKey | None:
    """The new key's row, unless the customer has a row already (an erased key, or a
    concurrent transaction's, which it waits for): then None."""
    values = {"email_hash": email_hash, "generation": 1, "key_enc": key_enc,
              "created_at": clock.now()}  # fmt: skip
    return NewKey(email_hash, 1, key_enc) if _INSERT_KEY.into(session, values) else None


def _key_row(session: Session, email_hash: str) -> CustomerKey | None:
    """The customer's key row as this transaction sees it, read once per transaction: the
    session's own row if it holds one (with this transaction's changes); else, on SQLite in
    a transaction that uses direct rows, a direct row (one SELECT on the driver's cursor:
    about 20 µs of CPU against the ORM load's 190); else the ORM's row, kept for the
    transaction (`held_get`).

    Whoever changes a key row changes the ORM's, and drops the direct row
    (`direct_rows.forget`), so a field is never opened with a key an erasure destroyed
    earlier in the same transaction. Not on PostgreSQL: there a returning customer's new key
    may be looked for in a savepoint rolled back (`_share_live_key_waiting`), which leaves a
    transaction's direct rows unusable; a refund's transaction holds the key `FOR SHARE` as
    the ORM's row already (`hold_key_of_case`), and its fields are opened with that."""
    if direct_rows.uses_direct_rows(session) and not _on_postgresql(session):
        held = session.identity_map.get(identity_key(CustomerKey, email_hash))
        if held is not None:
            return held
        return direct_rows.load(session, CustomerKey, email_hash)
    return held_get(session, CustomerKey, email_hash)


def _read_key(session: Session | None, db: Database | None, email_hash: str) -> CustomerKey | None:
    if session is not None:  # read once per transaction, however many fields it opens
        return _key_row(session, email_hash)
    if db is None:
        raise ValueError("a customer's field needs the database to be read")
    with db.read() as own:
        return own.get(CustomerKey, email_hash)
