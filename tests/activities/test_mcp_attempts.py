"""An MCP tool call's noted requests (``egress.attempts``): its own only, and kept no longer
than the call.

Concurrent calls on one pooled session each judge their own ``tools/call``: one whose
request was read may have run, though another's was refused. A pooled session outlives
the call that leased it, and tasks started in the call's context hold the call's list for
as long as they live: the MCP SDK's writer keeps the context of the last message sent on a
session (``last_context``), the pool's reaper the context it was started in. Real MCP
server on loopback.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import ErrorType, McpToolCall
from psych_runtime.activities.egress import Attempt, Egress, EgressRules, EgressSettings
from psych_runtime.activities.egress import _sent as sent
from psych_runtime.activities.mcp import McpActivities, McpSettings
from psych_runtime.specs import McpServer, Scope, StoreUnavailable
from tests.activities.test_sent_or_not import broken_store
from tests.mcp.fixture import McpTestServer, start_mcp_server

pytestmark = pytest.mark.long

ARGUMENT = "an order's whole history " * 400
"""An argument of some size, as a tool's arguments may be."""


@asynccontextmanager
async def pooled(
    tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[McpActivities, McpServer, McpTestServer]]:
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "ok"), egress=egress, settings=McpSettings(**settings)
    )
    served = start_mcp_server("streamable-http")
    try:
        yield mcp, McpServer(name="crm", url=served.url, transport="http"), served
    finally:
        served.stop()
        await mcp.aclose()
        await egress.aclose()


def charging(server: McpServer, amount: int) -> McpToolCall:
    """A call of ``charge``, not safe to repeat (its outcome kept through the client)."""
    return echo(server).model_copy(
        update={"tool": "charge", "arguments": {"amount": amount}, "report_through_client": True}
    )


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
    async with pooled(tmp_path) as (mcp, server, _):
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
    async with pooled(tmp_path, idle_seconds=0.2) as (mcp, server, _):
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


@asynccontextmanager
async def taking_one_call(port: int) -> AsyncIterator[tuple[list[bytes], asyncio.Event]]:
    """A listener on ``port`` that reads the first ``tools/call`` POST whole, then stops
    listening (later connections are refused) and holds that connection unanswered until
    the block ends; other requests are dropped unread. The calls it read, and an event set
    once it read one."""
    read: list[bytes] = []
    taken = asyncio.Event()
    done = asyncio.Event()

    async def take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        length = [int(line.split(b":", 1)[1]) for line in lines if b"content-length:" in line]
        body = await reader.readexactly(length[0]) if length else b""
        if b'"tools/call"' in body and not read:
            read.append(body)
            server.close()
            taken.set()
            await done.wait()
        writer.transport.abort()

    server = await asyncio.start_server(take, "127.0.0.1", port)
    try:
        yield read, taken
    finally:
        done.set()
        server.close()
        await server.wait_closed()


async def test_concurrent_calls_on_one_session_each_judge_their_own_request(
    tmp_path: Path,
) -> None:
    # Two calls of one tool on one pooled session whose server went away. Whatever listens
    # at its port now reads the first call's tools/call (it may act on it) and stops
    # listening; the second call's connection is refused. Each reads only the requests
    # made for it: the first may have run (ResultNotKept), the second did not.
    async with pooled(tmp_path, call_timeout_seconds=20) as (mcp, server, served):
        first = await ActivityEnvironment().run(mcp.call, echo(server))
        assert first.status == "ok"
        served.stop()  # the session is kept: the next calls are sent on it
        mcp.blobs = broken_store(tmp_path)
        async with taking_one_call(served.port) as (read, taken):
            one = asyncio.create_task(ActivityEnvironment().run(mcp.call, charging(server, 101)))
            async with asyncio.timeout(10):
                await taken.wait()
            with pytest.raises(StoreUnavailable, match=r"^the call did not run \(its request"):
                await ActivityEnvironment().run(mcp.call, charging(server, 202))
            with pytest.raises(ApplicationError) as caught:
                await one
    assert len(read) == 1 and b'"amount":101' in read[0], read
    assert caught.value.type == ErrorType.RESULT_NOT_KEPT
