"""Field encryption and the keyed email index, both derived from the deployment secret."""

from __future__ import annotations

import pytest

from refund_desk.crypto import Vault, derive_key, keyed_hash
from tests.conftest import TEST_SECRET

OTHER_SECRET = "other-secret-" + "z" * 40


@pytest.fixture()
def vault() -> Vault:
    return Vault(TEST_SECRET)


@pytest.mark.parametrize("plain", ["ada@example.com", "Ada Lovelace", "", "ünïcode ✓ 漢字"])
def test_encrypt_then_decrypt_round_trips(vault: Vault, plain: str) -> None:
    assert vault.decrypt(vault.encrypt(plain)) == plain


def test_none_passes_through(vault: Vault) -> None:
    assert vault.encrypt(None) is None
    assert vault.decrypt(None) is None


def test_ciphertext_hides_the_plaintext(vault: Vault) -> None:
    token = vault.encrypt("ada@example.com")
    assert token is not None
    assert token != "ada@example.com"
    assert "ada" not in token


def test_two_encryptions_differ(vault: Vault) -> None:
    assert vault.encrypt("ada@example.com") != vault.encrypt("ada@example.com")


def test_another_vault_with_the_same_secret_decrypts(vault: Vault) -> None:
    assert Vault(TEST_SECRET).decrypt(vault.encrypt("ada@example.com")) == "ada@example.com"


def test_wrong_secret_cannot_decrypt(vault: Vault) -> None:
    token = vault.encrypt("ada@example.com")
    with pytest.raises(ValueError, match="REFUND_DESK_SECRET"):
        Vault(OTHER_SECRET).decrypt(token)


def test_tampered_ciphertext_cannot_decrypt(vault: Vault) -> None:
    token = vault.encrypt("ada@example.com")
    assert token is not None
    tampered = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
    with pytest.raises(ValueError):
        vault.decrypt(tampered)


def test_email_hash_ignores_case_and_surrounding_space(vault: Vault) -> None:
    assert vault.email_hash("  Ada@Example.COM \n") == vault.email_hash("ada@example.com")


def test_email_hash_tells_addresses_apart(vault: Vault) -> None:
    assert vault.email_hash("ada@example.com") != vault.email_hash("bob@example.com")


def test_email_hash_is_keyed_by_the_secret(vault: Vault) -> None:
    assert vault.email_hash("ada@example.com") != Vault(OTHER_SECRET).email_hash("ada@example.com")


def test_email_hash_is_stable_hex(vault: Vault) -> None:
    digest = vault.email_hash("ada@example.com")
    assert digest == Vault(TEST_SECRET).email_hash("ada@example.com")
    assert len(digest) == 64
    int(digest, 16)


def test_keys_differ_by_purpose() -> None:
    assert derive_key(TEST_SECRET, "audit-chain") != derive_key(TEST_SECRET, "field-encryption")
    assert keyed_hash(TEST_SECRET, "a", "v") != keyed_hash(TEST_SECRET, "b", "v")
