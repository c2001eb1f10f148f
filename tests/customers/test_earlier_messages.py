"""What a customer's message quotes stays on the case for a person, sealed under their key;
the advisor reads none of it, and an erasure blanks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.customers.conftest import Channels, raw_email
from tests.customers.test_erasure import _erase, _file_bytes
from tests.helpers import CUSTOMER

QUOTE = (
    "On Mon, 3 Mar 2025 at 10:12, Shop <care@shop.example> wrote:\n"
    "> Your order ORD-77123 of 250.00 USD has shipped with the wombat courier.\n"
    "> Thanks for shopping"
)


def test_a_quoted_amount_and_reference_are_never_read_and_are_kept_sealed_then_erased(
    channels: Channels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payment = channels.payment("30.00")
    posted = channels.post_email(
        raw_email(
            subject=f"Refund for {payment}",
            text=f"My kettle arrived dented, I would like my money back.\n\n{QUOTE}\n",
        )
    )
    assert posted.status_code == 201, posted.text
    case_id = posted.json()["case"]
    channels.sweep()
    view = channels.get(case_id)
    advice = view["advice"]
    assert advice["amount_minor"] is None  # the 250.00 USD is in the quote only
    assert advice["order_ref"] != "ORD-77123"
    assert "ORD-77123" in view["earlier_messages"] and "wombat" in view["earlier_messages"]
    assert "ORD-77123" not in channels.case(case_id).message_enc  # type: ignore[operator]
    if channels.runtime.settings.is_sqlite:
        assert b"wombat" not in _file_bytes(channels)  # sealed under the customer's key

    _erase(channels, CUSTOMER, tmp_path, monkeypatch)
    assert channels.get(case_id)["earlier_messages"] is None
    assert channels.case(case_id).earlier_enc is None
