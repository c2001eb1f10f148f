"""The API does what its served document says: Schemathesis (`st run`, as an integrator's own
test suite would run it) against `/openapi.json` of the real server on loopback, with an API key,
every `/api/v1/` operation, Schemathesis' default checks, a fixed seed and a bounded number of
examples. Any finding fails the test, with Schemathesis' report.

The hooks (`openapi_hooks.py`) make a drawn valid request name a payment that exists in its
currency and a cursor the API gave: the document cannot say which exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from refund_desk import money
from refund_desk.runtime import Runtime
from refund_desk.web.api_models import CaseDetail, CasePage, CaseView, ErrorBody
from tests.helpers import CUSTOMER, Harness, LiveServer

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("REFUND_DESK_SCHEMATHESIS_SEED", "20261206"))  # another: explore
EXAMPLES = 25  # per operation and phase: about 300 requests, 10-20 s


def _world(desk: Harness) -> dict[str, str]:
    """A payment in each currency (large enough for any drawn amount) and a real cursor."""
    payments = {
        code: desk.sandbox.create_payment(
            amount=money.MAX_MINOR - 1, currency=code, email=CUSTOMER, name="Ada Lovelace"
        )
        for code in sorted(money.CURRENCIES)
    }
    for _ in range(2):
        assert desk.post(desk.request(payments["USD"])).status_code == 201
    page = desk.client.get(
        "/api/v1/cases?limit=1", headers={"Authorization": f"Bearer {desk.key}"}
    ).json()
    return {
        "REFUND_DESK_TEST_PAYMENTS": json.dumps(payments),
        "REFUND_DESK_TEST_CURSOR": page["next_cursor"],
    }


@pytest.mark.slow
def test_schemathesis_finds_nothing_on_the_api(runtime: Runtime, tmp_path: Path) -> None:
    desk = Harness(runtime)
    desk.publish()
    env = {
        **os.environ,
        **_world(desk),
        "SCHEMATHESIS_HOOKS": "tests.web.openapi_hooks",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    before = desk.counts()[0]
    server = LiveServer(runtime, scheduler=True)
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{server.url}/openapi.json",
                "--include-path-regex",
                "^/api/v1/",
                "--header",
                f"Authorization: Bearer {desk.key}",
                "--seed",
                str(SEED),
                "--max-examples",
                str(EXAMPLES),
                "--request-timeout",
                "15",
            ],
            cwd=tmp_path,  # no configuration file of ours or anyone's is read
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    if run.returncode != 0:
        pytest.fail(f"Schemathesis found something:\n{run.stdout}\n{run.stderr}", pytrace=False)
    assert "4 selected" in run.stdout or "Selected: 4/" in run.stdout, run.stdout[-3000:]
    # Not a run of refusals: drawn requests made cases.
    assert desk.counts()[0] - before >= 10, run.stdout[-3000:]


def test_the_documents_examples_validate() -> None:
    """Each example in the document validates against its schema and its model; the request's
    is one the API's model takes."""
    from jsonschema import Draft202012Validator

    from refund_desk.cases.intake import RefundRequest
    from refund_desk.web.api_models import refund_request_schema

    for model in (CaseView, ErrorBody):
        schema = model.model_json_schema()
        assert schema["examples"]
        for example in schema["examples"]:
            Draft202012Validator(schema).validate(example)
            model.model_validate(example)
    request = refund_request_schema(["sandbox"])
    for example in request["examples"]:
        Draft202012Validator(request).validate(example)
        RefundRequest.model_validate(example)


def test_the_models_take_what_the_api_answers(runtime: Runtime) -> None:
    """The models are the answers' own shape: a case as intake answers it, as the list shows it,
    as one case's record shows it; the error envelope."""
    desk = Harness(runtime)
    desk.publish()
    headers = {"Authorization": f"Bearer {desk.key}"}
    created = desk.post(desk.request(desk.payment()))
    assert created.status_code == 201, created.text
    CaseView.model_validate(created.json())
    detail: dict[str, Any] = desk.get(created.json()["id"])
    CaseDetail.model_validate(detail)
    assert set(detail) == set(CaseDetail.model_fields)
    assert set(created.json()) == set(CaseView.model_fields)
    CasePage.model_validate(desk.client.get("/api/v1/cases", headers=headers).json())
    missing = desk.client.get("/api/v1/cases/case_nope", headers=headers)
    assert missing.status_code == 404
    ErrorBody.model_validate(missing.json())
