"""Keys derived from the deployment secret, field encryption, and keyed hashes.

One secret (`REFUND_DESK_SECRET`) feeds every key through HKDF with a distinct purpose, so a
leaked action-token key says nothing about the audit key, and rotating the secret rotates all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


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


class Vault:
    """Encrypts personal fields at rest and makes blind indexes for matching them."""

    def __init__(self, secret: str) -> None:
        self._secret = secret
        self._fernet = Fernet(base64.urlsafe_b64encode(derive_key(secret, "field-encryption")))

    def encrypt(self, value: str | None) -> str | None:
        return None if value is None else self._fernet.encrypt(value.encode()).decode()

    def decrypt(self, token: str | None) -> str | None:
        if token is None:
            return None
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken as exc:  # a different secret, or a tampered column
            raise ValueError("cannot decrypt a stored field: wrong REFUND_DESK_SECRET?") from exc

    def email_hash(self, email: str) -> str:
        return keyed_hash(self._secret, "email-index", normalize_email(email))
