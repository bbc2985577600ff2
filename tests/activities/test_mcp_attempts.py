"""What an MCP tool call's noted requests (``egress.attempts``) outlive: nothing.

A pooled session outlives the call that leased it, and tasks started in the call's context
hold the call's list of attempts (each request's body: the tool's arguments) for as long
as they live: the MCP SDK's writer keeps the context of the last message sent on a session
(``last_context``), the pool's reaper the context it was started in. Real MCP server on
loopback.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import McpToolCall
from psych_runtime.activities.egress import Attempt, Egress, EgressRules, EgressSettings
from psych_runtime.activities.egress import _sent as sent
from psych_runtime.activities.mcp import McpActivities, McpSettings
from psych_runtime.specs import McpServer, Scope
from tests.mcp.fixture import start_mcp_server

ARGUMENT = "an order's whole history " * 400
"""An argument of some size, as a tool's arguments may be."""


@asynccontextmanager
async def pooled(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[McpActivities, McpServer]]:
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"), egress=egress, settings=McpSettings(**settings)
    )
    served = start_mcp_server("streamable-http")
    try:
        yield mcp, McpServer(name="crm", url=served.url, transport="http")
    finally:
        served.stop()
        await mcp.aclose()
        await egress.aclose()


def echo(server: McpServer) -> McpToolCall:
    return McpToolCall(
        run_id="r1",
        call_id="c1",
        server=server,
        tool="echo",
        arguments={"text": ARGUMENT},
        large_result_bytes=1_000_000,
        scope=Scope(tenant="acme"),
    )


async def test_a_call_keeps_none_of_its_requests_once_it_is_judged(tmp_path: Path) -> None:
    # Before: the call's attempts (its tools/call body, the argument whole) stayed alive
    # while its session stayed open, through the SDK writer's last_context.
    async with pooled(tmp_path) as (mcp, server):
        done = await ActivityEnvironment().run(mcp.call, echo(server))
        assert done.status == "ok"
        assert len(mcp.sessions.keys) == 1  # the session is kept, idle
        gc.collect()
        kept = [o for o in gc.get_objects() if isinstance(o, Attempt)]
        assert kept == []


async def test_the_session_reaper_starts_outside_the_opening_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the reaper was started in the context of the call that opened the pool's
    # first session, its attempts block too, and held that call's list as long as it ran.
    async with pooled(tmp_path, idle_seconds=0.2) as (mcp, server):
        seen: list[object] = []
        dropped = asyncio.Event()
        drop = mcp.sessions._drop

        def dropping(session: Any) -> None:
            seen.append(sent._ATTEMPTS.get())
            drop(session)
            dropped.set()

        monkeypatch.setattr(mcp.sessions, "_drop", dropping)
        done = await ActivityEnvironment().run(mcp.call, echo(server))
        assert done.status == "ok"
        async with asyncio.timeout(10):
            await dropped.wait()  # the reaper drops the idle session
        assert seen == [None]
