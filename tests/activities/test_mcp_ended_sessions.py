"""A pooled MCP session whose server ended its stream is not lent again.

An SSE server that shuts down cleanly ends the session's event stream; the SDK then
refuses every request on that session ("Connection closed") before sending it. Lent
again, such a session failed a call not safe to repeat as one that may have run, though
its ``tools/call`` never left. The pool notices the end and connects afresh instead; a
call on a session that ended while lent says it did not run when nothing was handed to
the transport during its lease. A token store failing one call's OAuth flow is that
call's ``StoreUnavailable`` only, never another call's on the session.

Real MCP test servers in their own processes on loopback; the store's disk refuses for
real (a file stands where its directory goes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import ErrorType
from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.activities.mcp import McpActivities
from psych_runtime.activities.mcp._call import Round, call_round
from psych_runtime.activities.mcp._pool import McpSessions, SessionBroke, SessionKey
from psych_runtime.activities.mcp._streams import StreamWatch, _Writing
from psych_runtime.specs import McpServer, Scope, StoreUnavailable
from tests.activities.test_mcp import eventually
from tests.activities.test_sent_or_not import broken_store, mcp_call
from tests.mcp.fixture import McpTestServer, start_mcp_server

DID_NOT_RUN = r"^the call did not run \(its request never left\), and its outcome \(error\)"


def loopback() -> Egress:
    return Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))


def pool(egress: Egress) -> McpSessions:
    return McpSessions(
        max_sessions=4,
        idle_seconds=60,
        connect_timeout=10,
        on_tools_changed=lambda key: None,
        egress=egress,
    )


def key_of(served: McpTestServer) -> SessionKey:
    return SessionKey.of(Scope(tenant="acme"), served.url, "sse", None)


async def test_an_sse_session_whose_server_shut_down_is_not_lent_again(tmp_path: Path) -> None:
    # Before: the pool kept the ended session and lent it; the SDK failed the tools/call
    # with "Connection closed" before any POST, and with no attempt seen the call was
    # taken as one that may have run: ResultNotKept, though nothing left the worker.
    egress = loopback()
    mcp = McpActivities(blobs=LocalBlobStore(tmp_path / "ok"), egress=egress)
    served = start_mcp_server("sse")
    server = McpServer(name="crm", url=served.url, transport="sse")
    try:
        first = await ActivityEnvironment().run(mcp.call, mcp_call(server, "echo", text="hi"))
        assert (first.status, first.content) == ("ok", "hi")
        served.stop()  # SIGTERM: the server ends its event streams and exits
        await eventually(lambda: not mcp.sessions.keys, within=10)  # the pool noticed
        mcp.blobs = broken_store(tmp_path)
        with pytest.raises(StoreUnavailable, match=DID_NOT_RUN):
            await ActivityEnvironment().run(mcp.call, mcp_call(server, "charge", amount=1))
    finally:
        served.stop()
        await mcp.aclose()
        await egress.aclose()


async def charge_once_ended(sessions: McpSessions, served: McpTestServer) -> None:
    """Lease the session of ``served``, stop the server, and once the session saw it end,
    call ``charge`` on it."""
    key = key_of(served)
    async with sessions.client(key, served.url, {}) as client:
        served.stop()
        await eventually(lambda: sessions._sessions[key].watch.ended, within=10)
        await client.call_tool("charge", {"amount": 1})


async def test_a_request_on_a_session_that_ended_while_lent_was_not_handed_over() -> None:
    # The session ends while a lease holds it: its tools/call is refused by the SDK
    # before it reaches the transport, which the lease's failure says (nothing handed).
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("sse")
    try:
        async with sessions.client(key_of(served), served.url, {}) as client:
            assert (await client.call_tool("echo", {"text": "a"})).is_error is False
        with pytest.raises(SessionBroke) as caught:
            await charge_once_ended(sessions, served)
        assert caught.value.nothing_handed
        assert str(caught.value) == "the session broke: the server ended the session"
        await eventually(lambda: not sessions.keys, within=10)  # closed as its lease ended
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def slow_while_stopping(sessions: McpSessions, served: McpTestServer) -> None:
    """Lease the session of ``served``, call ``slow`` and stop the server once it runs."""
    async with sessions.client(key_of(served), served.url, {}) as client:
        slow = asyncio.create_task(client.call_tool("slow", {"seconds": 30}))
        await eventually(lambda: served.calls("slow") == 1, within=10)
        served.stop()
        await slow


async def test_a_request_the_transport_took_may_have_left() -> None:
    # The converse: a request handed to the transport before the end is never claimed
    # unsent (the server read a tools/call, then went away mid-call).
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("sse")
    try:
        with pytest.raises(SessionBroke) as caught:
            await slow_while_stopping(sessions, served)
        assert not caught.value.nothing_handed
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_a_call_the_server_read_before_it_shut_down_may_have_run(tmp_path: Path) -> None:
    # The activity's view of the same: a write the server took may have run.
    egress = loopback()
    mcp = McpActivities(blobs=broken_store(tmp_path), egress=egress)
    served = start_mcp_server("sse")
    server = McpServer(name="crm", url=served.url, transport="sse")
    charge = mcp_call(server, "charge", amount=1, sleep_seconds=30)
    try:
        call = asyncio.create_task(ActivityEnvironment().run(mcp.call, charge))
        await eventually(lambda: served.calls("charge") == 1, within=20)
        served.stop()
        with pytest.raises(ApplicationError) as caught:
            await call
        assert caught.value.type == ErrorType.RESULT_NOT_KEPT
    finally:
        served.stop()
        await mcp.aclose()
        await egress.aclose()


class StoreDownFor(httpx2.Auth):
    """An OAuth provider whose token store fails for a request carrying ``marker`` (once
    ``gate`` is set, when one is given; ``waiting`` meanwhile)."""

    requires_request_body = True

    def __init__(self, marker: bytes, gate: asyncio.Event | None = None) -> None:
        self.marker = marker
        self.gate = gate
        self.waiting = False

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.marker in request.content:
            if self.gate is not None:
                self.waiting = True
                await self.gate.wait()
            raise StoreUnavailable("the token store did not answer")
        yield request


async def test_a_token_store_failure_is_blamed_on_its_own_call_only() -> None:
    # Before: a call whose tools/call the server was running got the other call's
    # StoreUnavailable (the last failure the session was told of), which the activity
    # takes as a call never sent and retries: a write run twice. Since 12-07 the failed
    # flow fails its own request alone, and the call gets its answer
    # (test_mcp_told_posts.py).
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("streamable-http")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "http", "token")
    auth = StoreDownFor(b"needs-a-token")

    async def call(tool: str, arguments: dict[str, object]) -> object:
        async with sessions.client(key, served.url, {}, auth) as client:
            return await client.call_tool(tool, arguments)

    try:
        slow = asyncio.create_task(call("slow", {"seconds": 2}))
        await eventually(lambda: served.calls("slow") == 1, within=20)
        with pytest.raises(StoreUnavailable):
            await call("echo", {"text": "needs-a-token"})
        assert "slept 2" in str(await slow)
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def nothing(progress: float, total: float | None, message: str | None) -> None:
    """A round's progress callback that ignores progress."""


async def echo_round(
    sessions: McpSessions, key: SessionKey, url: str, auth: httpx2.Auth, text: str
) -> object:
    """One ``echo`` round (``call_round``, as the activity's) on a lease of ``key``: a
    request failing on an SSE session fails it at once (``_lease.unless_told``)."""
    async with sessions.client(key, url, {}, auth) as client:
        async with asyncio.timeout(5):  # the SDK would leave it waiting for 300 s
            return await call_round(client, "echo", {"text": text}, nothing, None, Round())


async def charge_after_the_break(
    sessions: McpSessions, key: SessionKey, url: str, auth: httpx2.Auth, broke: asyncio.Event
) -> None:
    """Lease ``key``'s session, and call ``charge`` on it once ``broke`` is set."""
    async with sessions.client(key, url, {}, auth) as client:
        await broke.wait()
        await client.call_tool("charge", {"amount": 1})


async def test_a_request_the_transport_refused_after_its_writer_ended_was_not_handed() -> None:
    # An SSE session's writer (the SDK's post_writer) ends when one POST fails, here a
    # token store failing that call's OAuth flow; it closes the stream requests are handed
    # through. A later tools/call on the session (by a lease that held it before: it is
    # lent no more) is refused unsent (anyio's ClosedResourceError, never delivered).
    # Before: counted as handed over, so the call was reported as one that may have run
    # (the server saw no charge).
    egress = loopback()
    sessions = pool(egress)
    served = start_mcp_server("sse")
    key = SessionKey.of(Scope(tenant="acme"), served.url, "sse", "token")
    gate, broke = asyncio.Event(), asyncio.Event()
    auth = StoreDownFor(b"needs-a-token", gate)
    try:
        await echo_round(sessions, key, served.url, auth, "connects")
        failing = asyncio.create_task(echo_round(sessions, key, served.url, auth, "needs-a-token"))
        await eventually(lambda: auth.waiting, within=10)  # its POST's flow has begun
        charging = asyncio.create_task(
            charge_after_the_break(sessions, key, served.url, auth, broke)
        )
        await eventually(lambda: sessions._sessions[key].users == 2, within=10)
        gate.set()
        with pytest.raises(StoreUnavailable):
            await failing
        broke.set()
        with pytest.raises(SessionBroke) as caught:
            await charging
        assert served.calls("charge") == 0
        assert caught.value.nothing_handed
    finally:
        served.stop()
        await sessions.aclose()
        await egress.aclose()


async def test_a_write_the_transport_withdrew_undelivered_is_not_counted() -> None:
    # anyio withdraws a write waiting on a stream its transport then closes (its item never
    # delivered) and raises ClosedResourceError: not handed over, as one refused at once.
    send, receive = anyio.create_memory_object_stream[str](0)
    watch = StreamWatch(on_end=lambda: None)
    writing = _Writing[str](send, watch)
    waiting = asyncio.create_task(writing.send("tools/call"))
    await asyncio.sleep(0.05)  # it waits: nobody receives
    send.close()  # the transport's writer ends
    with pytest.raises(anyio.ClosedResourceError):
        await waiting
    with pytest.raises(anyio.ClosedResourceError):
        await writing.send("tools/call")
    receive.close()
    assert watch.handed == 0
