"""Evidence items on a case as the people who may read the case see them.

What the customer chose (`PERSONAL`) is sealed under their data key; the rest is in clear
(the policy counts it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from refund_desk.cases.advisory import ERASED

if TYPE_CHECKING:
    from sqlmodel import Session

    from refund_desk.storage.crypto import Vault

PERSONAL = ("url", "filename", "name")  # an item's parts the customer chose ("name": none yet)


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
