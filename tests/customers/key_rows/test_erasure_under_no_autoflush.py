"""An erasure is written at once: a key row locked again (`lock_customer_key`, read afresh
with `populate_existing`) inside `no_autoflush` after an erasure in the same transaction
does not take the key back, with direct rows or without."""

from __future__ import annotations

import pytest

from refund_desk import clock
from refund_desk.storage import direct_rows
from refund_desk.storage.crypto import Vault, destroy_customer_key, lock_customer_key
from refund_desk.storage.db import Database
from tests.customers.key_rows.keys_common import key_table, make_customer


@pytest.mark.parametrize("direct", [True, False])
def test_an_erasure_survives_a_lock_under_no_autoflush(
    keys_db: Database, vault: Vault, direct: bool
) -> None:
    eh, token = make_customer(keys_db, vault, "a@example.com")
    with keys_db.write() as session:
        if direct:
            direct_rows.use_direct_rows(session)
        assert destroy_customer_key(session, eh, clock.now())
        with session.no_autoflush:
            lock_customer_key(session, eh)
        assert vault.decrypt(token, session=session) is None
    assert key_table(keys_db)[0][2] is None
