"""`refund-desk api-key rotate NAME`: a new key printed once, the old one in its grace."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import run


def test_rotate_prints_a_new_key_and_lists_the_old_one_as_rotating(cli_db: Path) -> None:
    old = run("api-key", "create", "--name", "shop").strip()
    new = run("api-key", "rotate", "shop", "--grace", "2h").strip()
    assert new.startswith("rdk_") and new != old
    keys = json.loads(run("api-key", "list", "--json"))
    assert [(k["prefix"], k["state"]) for k in keys] == [
        (old[:10], "rotating"),
        (new[:10], "active"),
    ]
    assert keys[0]["expires_at"] is not None and keys[0]["last_used_at"] is None
    listing = run("api-key", "list")
    assert "rotating until" in listing and "last used never" in listing
    assert "No API key" in run("api-key", "rotate", "nobody", code=2)
    assert "--grace" in run("api-key", "rotate", "shop", "--grace", "soon", code=2)
    assert "ok: 2 records" in run("audit", "verify")  # created, rotated
