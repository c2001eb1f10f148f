"""The admin's command line, in process, against a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import run
from tests.helpers import ACME

pytestmark = pytest.mark.usefixtures("cli_db")


def create_payment(amount: str, currency: str, *options: str, code: int = 0) -> str:
    """`sandbox payment create` for ada@example.com unless `options` say another --email."""
    email = [] if "--email" in options else ["--email", "ada@example.com"]
    created = ["sandbox", "payment", "create", "--amount", amount, "--currency", currency]
    return run(*created, *email, *options, code=code)


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["serve"],
        ["demo"],
        ["db", "upgrade"],
        ["api-key", "create"],
        ["api-key", "list"],
        ["api-key", "revoke"],
        ["policy", "validate"],
        ["policy", "test"],
        ["policy", "publish"],
        ["audit", "verify"],
        ["audit", "export"],
        ["sandbox", "payment", "create"],
        ["sandbox", "payment", "show"],
        ["sandbox", "fault"],
        ["reconcile"],
        ["policy", "draft"],
        ["policy", "drafts"],
        ["policy", "shadow"],
        ["policy", "review-rate"],
        ["policy", "second-lead"],
        ["advisor", "eval"],
        ["slack", "doctor"],
        ["status"],
        ["backup"],
        ["api-key", "rotate"],
        ["cases", "export"],
        ["customer", "erase"],
    ],
)
def test_every_command_has_help(command: list[str]) -> None:
    assert "Usage" in run(*command, "--help")


def test_policy_validate_reports_every_problem_with_its_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        ACME.read_text()
        .replace("request.amount <= 50", "request.amout <= 50")
        .replace("outcome: review\n    tier: 3", "outcome: maybe\n    tier: 3")
    )
    output = run("policy", "validate", str(bad), code=1)
    assert "damaged-small" in output and "request.amout" in output
    assert "large" in output and "outcome" in output
    assert "valid policy 'acme-refunds' with 4 rules" in run("policy", "validate", str(ACME))


def test_policy_test_and_publish_refuse_failing_tests(tmp_path: Path) -> None:
    assert "1 passed, 0 failed" in run("policy", "test", str(ACME))
    failing = tmp_path / "failing.yaml"
    failing.write_text(ACME.read_text().replace("request.amount <= 50", "request.amount <= 10"))
    assert "FAIL" in run("policy", "test", str(failing), code=1)
    assert "policy test(s) failed" in run("policy", "publish", str(failing), code=1)
    assert "published acme-refunds v1" in run("policy", "publish", str(ACME))
    assert "published acme-refunds v2" in run("policy", "publish", str(ACME))


def test_sandbox_payment_create_show_and_faults() -> None:
    payment = create_payment("25.00", "usd").strip()
    shown = json.loads(run("sandbox", "payment", "show", payment))
    assert shown["amount"] == 2500 and shown["currency"] == "usd" and shown["refunds"] == []
    assert "No payment" in run("sandbox", "payment", "show", "py_missing", code=1)
    assert "sandbox fault: down for 2" in run("sandbox", "fault", "down", "--times", "2")
    assert "Invalid value" in run("sandbox", "fault", "melt", code=2)  # a closed choice
    assert "more decimals than JPY allows" in create_payment(
        "1.5", "jpy", "--email", "a@b.co", code=2
    )


def test_api_key_is_printed_once(cli_db: Path) -> None:
    key = run("api-key", "create", "--name", "shop").strip()
    assert key.startswith("rdk_") and len(key) > 30


def test_api_keys_are_listed_and_revoked_on_the_record(cli_db: Path) -> None:
    from fastapi.testclient import TestClient

    from refund_desk.runtime import build
    from refund_desk.settings import load_settings
    from refund_desk.web.app import create_app

    key = run("api-key", "create", "--name", "shop").strip()
    run("api-key", "create", "--name", "helpdesk")
    [shop, _helpdesk] = json.loads(run("api-key", "list", "--json"))
    assert (shop["name"], shop["prefix"], shop["revoked_at"]) == ("shop", key[:10], None)
    assert key not in run("api-key", "list")  # only the start of a key is ever shown

    runtime = build(load_settings(), migrate=True)
    client = TestClient(create_app(runtime, scheduler=False))
    ask = {"Authorization": f"Bearer {key}"}
    assert client.get("/api/v1/cases/c_missing", headers=ask).status_code == 404

    assert "revoked 1 key named shop" in run("api-key", "revoke", "shop")
    assert client.get("/api/v1/cases/c_missing", headers=ask).status_code == 401
    listed = {k["name"]: k["revoked_at"] for k in json.loads(run("api-key", "list", "--json"))}
    assert listed["shop"] is not None and listed["helpdesk"] is None
    assert "is revoked" in run("api-key", "revoke", "shop", code=2)
    assert "No API key" in run("api-key", "revoke", "nobody", code=2)
    assert "ok: 3 records" in run("audit", "verify")  # two created, one revoked
    runtime.db.dispose()


def test_audit_verify_and_export(cli_db: Path, tmp_path: Path) -> None:
    run("policy", "publish", str(ACME))
    assert "ok: 1 records" in run("audit", "verify")
    out = tmp_path / "audit.jsonl"
    run("audit", "export", "--output", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["action"] == "policy.published"
    assert lines[-1] == {"head_hash": lines[0]["hash"], "count": 1}


def test_sandbox_payment_create_count_prints_one_id_a_line() -> None:
    output = create_payment("12.50", "eur", "--count", "25")
    ids = output.split()
    assert len(ids) == 25 and len(set(ids)) == 25
    for payment in (ids[0], ids[-1]):
        shown = json.loads(run("sandbox", "payment", "show", payment))
        assert shown["amount"] == 1250 and shown["currency"] == "eur"
    assert "greater than or equal to 1" in create_payment(
        "1", "usd", "--email", "a@b.co", "--count", "0", code=2
    )


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff",
        "\x00\xff".encode(),
        ACME.read_bytes().replace(b"limit: 500", b"limit: 1e400"),
    ],
    ids=["not-utf8", "control-characters", "limit-beyond-any-amount"],
)
def test_policy_validate_refuses_a_bad_document_in_one_line(tmp_path: Path, content: bytes) -> None:
    assert b"limit: 500" in ACME.read_bytes()
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    out = run("policy", "validate", str(bad), code=1)
    assert "Traceback" not in out and out.strip()


def test_rotate_refuses_a_grace_beyond_ten_years_and_changes_nothing() -> None:
    run("api-key", "create", "--name", "shop")
    out = run("api-key", "rotate", "shop", "--grace", "99999999999d", code=2)
    assert "ten years" in out
    [key] = json.loads(run("api-key", "list", "--json"))
    assert (key["state"], key["expires_at"]) == ("active", None)


def test_sandbox_refuses_an_amount_beyond_what_is_stored() -> None:
    assert "too large" in create_payment("99999999999999999999999", "usd", code=2)
