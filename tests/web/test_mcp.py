"""The MCP server through the `mcp` SDK's own client, over both transports: streamable HTTP at
`/mcp` on the real app (an API key and its scope) and stdio (`refund-desk mcp --as USER`, run
as the README's client configuration says). It reads, explains, simulates and proposes; it
never moves money; every call is on the audit record."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import select

from refund_desk.api_keys import create_api_key
from refund_desk.demo.runner import policy_source
from refund_desk.runtime import Runtime
from refund_desk.storage.models import AuditRecord
from tests.conftest import make_runtime
from tests.helpers import CUSTOMER, Harness, LiveServer

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "find_cases",
    "get_case",
    "explain_decision",
    "simulate_policy",
    "policy_versions",
    "policy_diff",
    "policy_regions",
    "propose_refund",
    "desk_status",
}
MOVES_MONEY = re.compile(r"approv|deny|escalat|execut|pay|refund(?!_)|publish|pause|mode|rollback")


@pytest.fixture()
def desk(sqlite_url: str) -> Iterator[Harness]:
    runtime = make_runtime(sqlite_url)
    harness = Harness(runtime)
    harness.publish(policy_source())
    yield harness
    runtime.db.dispose()


@asynccontextmanager
async def over_http(server: LiveServer, key: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def answer(result: Any) -> Any:
    assert not result.isError, result.content
    return json.loads(result.content[0].text)


def _calls(runtime: Runtime) -> list[tuple[str, str]]:
    with runtime.db.read() as session:
        rows = session.scalars(select(AuditRecord).where(AuditRecord.action == "mcp.call")).all()
        return [(f"{r.actor_kind}:{r.actor_id}", r.payload["tool"]) for r in rows]


def test_over_http_an_assistant_reads_explains_simulates_and_proposes(desk: Harness) -> None:
    server = LiveServer(desk.runtime)
    small, large = desk.payment("30.00"), desk.payment("80.00")
    reader = create_api_key(desk.runtime.db, "reader", scope="read")

    async def session_work() -> None:
        async with over_http(server, desk.key) as mcp:
            listed = {tool.name for tool in (await mcp.list_tools()).tools}
            assert listed == TOOLS
            assert not [t for t in listed - {"propose_refund"} if MOVES_MONEY.search(t)]
            paid = answer(
                await mcp.call_tool(
                    "propose_refund",
                    {
                        "payment": small,
                        "email": CUSTOMER,
                        "currency": "USD",
                        "amount": "20.00",
                        "message": "The vase arrived broken.",
                    },
                )
            )
            assert paid["status"] == "refunded", paid
            held = answer(
                await mcp.call_tool(
                    "propose_refund",
                    {
                        "payment": large,
                        "email": CUSTOMER,
                        "currency": "USD",
                        "amount": "60.00",
                        "message": "The lamp arrived broken.",
                    },
                )
            )
            assert held["status"] == "awaiting_approval", held
            assert held["decision"]["rule"] == "agent-proposal"
            found = answer(await mcp.call_tool("find_cases", {"payment": small}))
            assert [c["id"] for c in found["cases"]] == [paid["case_id"]]
            record = answer(await mcp.call_tool("get_case", {"case_id": held["case_id"]}))
            assert record["source"] == "agent" and record["audit"]
            summary = record["advice"]["summary"]
            assert summary["customer_content"] and summary["injection_suspected"] is False
            why = answer(await mcp.call_tool("explain_decision", {"case_id": held["case_id"]}))
            assert why["rule"] == "agent-proposal" and why["trace"] and why["facts"]
            simulated = answer(
                await mcp.call_tool(
                    "simulate_policy",
                    {
                        "given": {
                            "request": {"amount": 20, "reason": "damaged"},
                            "order": {"refundable": 20, "age_days": 3},
                        }
                    },
                )
            )
            assert (simulated["outcome"], simulated["rule"]) == ("approve", "damaged-small")
            desk.publish(policy_source().replace("request.amount <= 50", "request.amount <= 80"))
            versions = answer(await mcp.call_tool("policy_versions", {}))["versions"]
            assert [v["version"] for v in versions] == [2, 1] and versions[0]["active"]
            changes = answer(await mcp.call_tool("policy_diff", {"old": 1, "new": 2}))["changes"]
            assert [(c["kind"], c["name"]) for c in changes] == [("changed", "damaged-small")]
            regions = answer(await mcp.call_tool("policy_regions", {"old": 1, "new": 2}))
            assert regions["more_permissive"] is True, regions
            assert regions["regions"] and regions["regions"][0]["given"]
            status = answer(await mcp.call_tool("desk_status", {}))
            assert status["waiting"] == {"awaiting_approval": 1} and status["paused"] is False
            policy = await mcp.read_resource("policy://active")
            assert "agent-proposal" in policy.contents[0].text  # type: ignore[union-attr]
        async with over_http(server, reader) as mcp:
            refused = await mcp.call_tool(
                "propose_refund",
                {"payment": large, "email": CUSTOMER, "currency": "USD", "amount": "5.00"},
            )
            assert refused.isError and "scope `propose`" in refused.content[0].text
            assert answer(await mcp.call_tool("get_case", {"case_id": held["case_id"]}))

    try:
        anyio.run(session_work)
    finally:
        server.stop()
    calls = _calls(desk.runtime)
    assert ("api:tests", "propose_refund") in calls and ("api:reader", "propose_refund") in calls
    assert len(calls) == 13  # every call and resource read, refused ones too
    assert len(desk.refunds_at_processor(large)) == 0  # the proposal over 50 waits for a person


def test_over_http_without_a_valid_key_nothing_is_answered(desk: Harness) -> None:
    server = LiveServer(desk.runtime)
    try:
        with httpx.Client(base_url=server.url) as client:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            for headers in ({}, {"Authorization": "Bearer rdk_not_a_key"}):
                refused = client.post("/mcp", json=body, headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "unauthorized"
    finally:
        server.stop()
    assert _calls(desk.runtime) == []


def _readme_stdio_config() -> dict[str, Any]:
    blocks = re.findall(r"```json\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    configs = [json.loads(b)["mcpServers"]["refund-desk"] for b in blocks if '"command"' in b]
    assert len(configs) == 1, "the README shows one stdio configuration"
    return dict(configs[0])


def test_the_readmes_stdio_configuration_works_as_written(desk: Harness, tmp_path: Path) -> None:
    config = _readme_stdio_config()
    payment = desk.payment("30.00")
    env = {
        **config["env"],
        "DATABASE_URL": desk.runtime.settings.database_url,  # the test's, where README has a path
        "REFUND_DESK_SECRET": desk.runtime.settings.secret_value(),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
    }
    params = StdioServerParameters(command=config["command"], args=config["args"], env=env)
    user = config["args"][config["args"].index("--as") + 1]

    async def session_work() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
            proposed = answer(
                await mcp.call_tool(
                    "propose_refund",
                    {
                        "payment": payment,
                        "email": CUSTOMER,
                        "currency": "USD",
                        "amount": "20.00",
                        "message": "The mug came chipped.",
                    },
                )
            )
            assert proposed["status"] == "refunded", proposed
            record = answer(await mcp.call_tool("get_case", {"case_id": proposed["case_id"]}))
            assert record["advice"]["summary"]["customer_content"]  # a lead reads it

    anyio.run(session_work)
    assert (f"human:{user}", "propose_refund") in _calls(desk.runtime)
    assert len(desk.refunds_at_processor(payment)) == 1


def test_over_stdio_a_person_the_policy_does_not_name_reads_no_customer_words(
    desk: Harness, tmp_path: Path
) -> None:
    payment = desk.payment("30.00")
    case_id = desk.post(desk.request(payment, "20.00")).json()["id"]
    env = {
        "DATABASE_URL": desk.runtime.settings.database_url,
        "REFUND_DESK_SECRET": desk.runtime.settings.secret_value(),
        "HOME": str(tmp_path),
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "refund_desk", "mcp", "--as", "U0STRANGER"], env=env
    )

    async def session_work() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            record = answer(await mcp.call_tool("get_case", {"case_id": case_id}))
            assert record["advice"]["summary"] is None
            refused = await mcp.call_tool(
                "propose_refund",
                {"payment": payment, "email": CUSTOMER, "currency": "USD", "amount": "5.00"},
            )
            assert refused.isError and "not_allowed" in refused.content[0].text

    anyio.run(session_work)


def test_calls_are_rate_limited_per_caller_and_customer_text_is_bounded() -> None:
    from mcp.server.fastmcp.exceptions import ToolError

    from refund_desk.mcp_server import MOST_TEXT, RateLimit, _customer

    limits = RateLimit(per_minute=3)
    for _ in range(3):
        limits.take("api:a")
    with pytest.raises(ToolError, match="rate_limited"):
        limits.take("api:a")
    limits.take("api:b")  # another key has its own allowance
    marked = _customer("x" * (MOST_TEXT + 10), injection=True)
    assert marked is not None
    assert len(marked["customer_content"]) == MOST_TEXT and marked["truncated"]
    assert marked["injection_suspected"] is True


def test_a_read_key_files_no_request_through_the_api_either(desk: Harness) -> None:
    reader = create_api_key(desk.runtime.db, "reader", scope="read")
    refused = desk.post(desk.request(desk.payment("30.00"), "20.00"), key=reader)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "read_only_key"
    assert desk.counts()[0] == 0
    assert (
        "403"
        in desk.client.get("/openapi.json").json()["paths"]["/api/v1/refund-requests"]["post"][
            "responses"
        ]
    )
