"""Whether an HTTP tool's request left decides what its outcome claims.

A POST the server answered with a redirect the egress policy refused was sent: it is an
``error`` of a call that ran (``once``: a store that then does not keep it fails
``ResultNotKept``, which the Run records as run, result lost), never a ``denied`` call
that never went out. A POST whose connection was refused never left: a store that then
does not keep its outcome says the call did not run, never ``ResultNotKept``.

Real loopback servers; names the test's resolver answers; the store's disk refuses for
real (a file stands where its directory goes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf.json_format import MessageToJson
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.a2a import A2aActivities
from psych_runtime.activities.blobs import LocalBlobStore, LocalStoreFailed
from psych_runtime.activities.contract import A2aToolCall, ErrorType, McpToolCall
from psych_runtime.activities.egress import (
    Egress,
    EgressDenied,
    EgressRules,
    EgressSettings,
    never_sent,
)
from psych_runtime.activities.mcp import McpActivities, McpSettings
from psych_runtime.activities.tools import ToolActivities
from psych_runtime.specs import (
    A2APeer,
    HttpTool,
    McpServer,
    Scope,
    StoreUnavailable,
    ToolRegistry,
)
from tests._ports import free_port
from tests._upstream import Answer, Request, Upstream
from tests.a2a.peer import card
from tests.activities.test_tools import http_call
from tests.mcp.fixture import start_mcp_server


async def resolver(host: str, port: int) -> list[str]:
    assert host == "app.test", host  # nothing else is ever looked up
    return ["127.0.0.1"]


def broken_store(tmp_path: Path) -> LocalBlobStore:
    """A store whose every write fails: a file stands where its directory goes."""
    (tmp_path / "blobs").write_bytes(b"not a directory")
    return LocalBlobStore(tmp_path / "blobs")


def refund(url: str) -> HttpTool:
    return HttpTool(name="refund", description="Refund an order.", url=url, method="POST")


def redirected_to_loopback() -> Upstream:
    """A server answering every request 307 to the loopback address, which only the name
    ``app.test`` may reach."""

    def moved(request: Request) -> Answer:
        return Answer(307, "", headers=(("location", f"http://127.0.0.1:{free_port()}/x"),))

    return Upstream(moved)


@asynccontextmanager
async def tools(blobs: LocalBlobStore, **rules: tuple[str, ...]) -> AsyncIterator[ToolActivities]:
    egress = Egress(EgressSettings(rules=EgressRules(**rules)), resolver=resolver)
    try:
        yield ToolActivities(registry=ToolRegistry(), blobs=blobs, egress=egress)
    finally:
        await egress.aclose()


async def test_a_post_whose_redirect_was_refused_ran(tmp_path: Path) -> None:
    # Before: status "denied", "refund: egress refused: ...", as if never sent.
    with redirected_to_loopback() as server:
        port = server.url.rsplit(":", 1)[1]
        tool = refund(f"http://app.test:{port}/orders/{{id}}/refund")
        async with tools(LocalBlobStore(tmp_path / "blobs"), allow_hosts=("app.test",)) as acts:
            outcome = await ActivityEnvironment().run(acts.http, http_call(tool, id="42"))
    assert len(server.requests) == 1  # the POST reached the server
    assert outcome.status == "error"
    assert outcome.content.startswith(
        f"refund: POST http://app.test:{port}/orders/42/refund was sent; the server "
        "answered with a redirect that the egress policy refused: "
    ), outcome.content


async def test_a_post_whose_redirect_was_refused_is_kept_as_run_or_not_kept(
    tmp_path: Path,
) -> None:
    # Before: the store's error as is (StoreUnavailable), which the Run read as the call
    # failing, inviting a second POST.
    with redirected_to_loopback() as server:
        port = server.url.rsplit(":", 1)[1]
        tool = refund(f"http://app.test:{port}/orders/{{id}}/refund")
        async with tools(broken_store(tmp_path), allow_hosts=("app.test",)) as acts:
            with pytest.raises(ApplicationError) as caught:
                await ActivityEnvironment().run(acts.http, http_call(tool, id="42"))
    assert len(server.requests) == 1
    assert caught.value.type == ErrorType.RESULT_NOT_KEPT
    assert caught.value.non_retryable


async def test_a_post_whose_connection_was_refused_did_not_run(tmp_path: Path) -> None:
    # Before: ResultNotKept, "the tool ran, but its outcome (error) could not be kept",
    # which the Run records as run (RESULT_LOST) though nothing left the worker.
    tool = refund(f"http://127.0.0.1:{free_port()}/orders/{{id}}/refund")  # nothing listens
    async with tools(broken_store(tmp_path), allow_cidrs=("127.0.0.0/8",)) as acts:
        with pytest.raises(StoreUnavailable) as caught:
            await ActivityEnvironment().run(acts.http, http_call(tool, id="42"))
    assert str(caught.value).startswith(
        "the call did not run (its request never left), and its outcome (error) could not "
        "be kept: blob sha256:"
    ), caught.value


async def test_an_unsent_call_whose_disk_refuses_for_good_is_not_retried(tmp_path: Path) -> None:
    # Until 12-06 the unsent outcome's failure was built anew as a plain StoreUnavailable:
    # a LocalStoreFailed that lasts (here ENOTDIR) lost its non-retryable ApplicationError,
    # and the activity was tried again as often as its policy allowed, refused each time.
    tool = refund(f"http://127.0.0.1:{free_port()}/orders/{{id}}/refund")  # nothing listens
    async with tools(broken_store(tmp_path), allow_cidrs=("127.0.0.0/8",)) as acts:
        with pytest.raises(LocalStoreFailed) as caught:
            await ActivityEnvironment().run(acts.http, http_call(tool, id="42"))
    err = caught.value
    assert (err.type, err.non_retryable, err.lasting) == (ErrorType.LOCAL_STORE_FAILED, True, True)
    assert err.errno_name == "ENOTDIR"
    assert err.message == str(err)
    assert str(err).startswith(
        "the call did not run (its request never left), and its outcome (error) could not "
        "be kept: blob sha256:"
    ), err
    assert str(tmp_path) not in str(err)
    assert str(tmp_path) in err.detail  # the worker's log only


async def test_a_post_the_egress_policy_refused_did_not_run(tmp_path: Path) -> None:
    tool = refund(f"http://127.0.0.1:{free_port()}/orders/{{id}}/refund")
    said = r"^the call did not run \(its request never left\), and its outcome \(denied\)"
    async with tools(broken_store(tmp_path)) as acts:  # loopback refused
        with pytest.raises(StoreUnavailable, match=said):
            await ActivityEnvironment().run(acts.http, http_call(tool, id="42"))


async def test_never_sent_tells_a_refused_connection_from_a_refused_redirect() -> None:
    closed = f"http://127.0.0.1:{free_port()}/x"  # nothing listens
    refusing = Egress(EgressSettings(), resolver=resolver)  # loopback refused
    with pytest.raises(EgressDenied) as denied:
        await refusing.http("acme").post(closed)
    await refusing.aclose()
    assert never_sent(denied.value) and not denied.value.redirected
    allowing = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    with pytest.raises(httpx.ConnectError) as unreachable:
        await allowing.http("acme").post(closed)
    await allowing.aclose()
    assert never_sent(unreachable.value)
    with redirected_to_loopback() as server:
        by_name = Egress(
            EgressSettings(rules=EgressRules(allow_hosts=("app.test",))), resolver=resolver
        )
        port = server.url.rsplit(":", 1)[1]
        with pytest.raises(EgressDenied) as redirected:
            await by_name.http("acme").post(f"http://app.test:{port}/x")
        await by_name.aclose()
    assert redirected.value.redirected and not never_sent(redirected.value)
    assert not never_sent(RuntimeError("anything else"))


async def test_an_a2a_message_whose_peer_could_not_be_reached_did_not_run(
    tmp_path: Path,
) -> None:
    # Before: ResultNotKept (the message may have reached the peer) though the peer's card
    # could not even be fetched: nothing listens at its address.
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    a2a = A2aActivities(blobs=broken_store(tmp_path), egress=egress)
    call = A2aToolCall(
        run_id="r1",
        call_id="c1",
        peer=A2APeer(name="desk", url=f"http://127.0.0.1:{free_port()}/"),
        skill="refund",
        name="desk__refund",
        arguments={"message": "refund order 42"},
        large_result_bytes=100_000,
        scope=Scope(tenant="acme"),
        report_through_client=True,
    )
    try:
        with pytest.raises(StoreUnavailable, match=r"^the call did not run \(its request"):
            await ActivityEnvironment().run(a2a.call, call)
    finally:
        await egress.aclose()


async def test_an_mcp_call_whose_server_could_not_be_reached_did_not_run(
    tmp_path: Path,
) -> None:
    # Before: ResultNotKept ("the tool ran, but its outcome (error) could not be kept")
    # for a tool not safe to repeat whose server nothing listens at: connecting failed, so
    # its tools/call was never sent.
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    mcp = McpActivities(
        blobs=broken_store(tmp_path),
        egress=egress,
        settings=McpSettings(connect_timeout_seconds=5),
    )
    call = McpToolCall(
        run_id="r1",
        call_id="c1",
        server=McpServer(name="crm", url=f"http://127.0.0.1:{free_port()}/mcp"),
        tool="refund",
        arguments={"order": "42"},
        large_result_bytes=100_000,
        scope=Scope(tenant="acme"),
        report_through_client=True,
    )
    said = r"^the call did not run \(its request never left\), and its outcome \(error\)"
    try:
        with pytest.raises(StoreUnavailable, match=said):
            await ActivityEnvironment().run(mcp.call, call)
    finally:
        await mcp.aclose()
        await egress.aclose()


def a2a_call(peer_url: str) -> A2aToolCall:
    return A2aToolCall(
        run_id="r1",
        call_id="c1",
        peer=A2APeer(name="desk", url=peer_url + "/"),
        skill="refund",
        name="desk__refund",
        arguments={"message": "refund order 42"},
        large_result_bytes=100_000,
        scope=Scope(tenant="acme"),
        report_through_client=True,
    )


def card_sending_to(url: str, *, refuse_posts: bool = False) -> Upstream:
    """A peer serving its card, whose JSON-RPC interface is at ``url`` (``refuse_posts``:
    it answers a message 500, after taking it)."""
    document = MessageToJson(card(url, ("refund",)))

    def respond(request: Request) -> Answer:
        if request.method == "GET":
            return Answer(200, document)
        return Answer(500, "down") if refuse_posts else Answer(404, "")

    return Upstream(respond)


async def test_an_a2a_message_whose_connection_was_refused_did_not_run(tmp_path: Path) -> None:
    # The card was had; the message's own connection was refused (nothing listens at the
    # interface its card names): never_sent on the SDK's error, not the card's.
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    a2a = A2aActivities(blobs=broken_store(tmp_path), egress=egress)
    try:
        said = r"^the call did not run \(its request"
        with (
            card_sending_to(f"http://127.0.0.1:{free_port()}") as peer,
            pytest.raises(StoreUnavailable, match=said),
        ):
            await ActivityEnvironment().run(a2a.call, a2a_call(peer.url))
        assert [r.method for r in peer.requests] == ["GET"]  # the card only
    finally:
        await egress.aclose()


async def test_an_a2a_message_whose_tls_handshake_failed_did_not_run(tmp_path: Path) -> None:
    # Its card names an https interface where a plain HTTP server listens: the handshake
    # fails (the server reads a ClientHello, no request), so nothing of the message left.
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    a2a = A2aActivities(blobs=broken_store(tmp_path), egress=egress)
    try:
        with (
            card_sending_to("") as plain,
            card_sending_to(plain.url.replace("http:", "https:")) as peer,
            pytest.raises(StoreUnavailable, match=r"^the call did not run \(its request"),
        ):
            await ActivityEnvironment().run(a2a.call, a2a_call(peer.url))
        assert [r.method for r in peer.requests] == ["GET"]  # the card only
        assert plain.requests == []  # a handshake, never a request
    finally:
        await egress.aclose()


async def test_an_a2a_message_the_peer_took_and_failed_ran(tmp_path: Path) -> None:
    # The converse: the peer answered the message 500, so it left; a store that does not
    # keep the outcome is ResultNotKept (the Run says it ran), never "did not run".
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    a2a = A2aActivities(blobs=broken_store(tmp_path), egress=egress)
    try:
        with card_sending_to("", refuse_posts=True) as peer:
            # Its card names itself, whose address is known once it listens.
            peer.respond = card_sending_to(peer.url, refuse_posts=True).respond
            with pytest.raises(ApplicationError) as caught:
                await ActivityEnvironment().run(a2a.call, a2a_call(peer.url))
        assert [r.method for r in peer.requests] == ["GET", "POST"]  # the message left
        assert caught.value.type == ErrorType.RESULT_NOT_KEPT
    finally:
        await egress.aclose()


class FailingVault:
    """A SecretResolver whose own backend fails (not a missing secret)."""

    async def resolve(self, scope: Scope, name: str) -> str:
        raise RuntimeError("vault sealed")


async def test_an_a2a_message_whose_credential_could_not_be_resolved_did_not_run(
    tmp_path: Path,
) -> None:
    # Before: the plain store error (no "did not run"): a failure other than
    # PeerUnavailable before the message was built was taken as a message that may have
    # left, though nothing was sent (the card not even fetched).
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.1/32",))))
    a2a = A2aActivities(blobs=broken_store(tmp_path), egress=egress, secrets=FailingVault())
    call = a2a_call(f"http://127.0.0.1:{free_port()}")
    call = call.model_copy(update={"peer": call.peer.model_copy(update={"credential": "desk"})})
    try:
        with pytest.raises(StoreUnavailable, match=r"^the call did not run \(its request"):
            await ActivityEnvironment().run(a2a.call, call)
    finally:
        await egress.aclose()


@asynccontextmanager
async def reading_then_dropping(port: int = 0) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server (on ``port``, else a free one) that reads each request whole, then closes
    the connection unanswered; its base URL and the requests it read."""
    read: list[bytes] = []

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        read.append(head + await reader.readexactly(length))
        writer.transport.abort()

    server = await asyncio.start_server(drop, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", read
    finally:
        server.close()
        await server.wait_closed()


async def test_an_a2a_message_the_peer_read_and_dropped_may_have_run(tmp_path: Path) -> None:
    # The converse of a refused connection: the message was read whole, the connection
    # then dropped unanswered; the peer may act on it, so the outcome is ResultNotKept.
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    a2a = A2aActivities(blobs=broken_store(tmp_path), egress=egress)
    try:
        async with reading_then_dropping() as (url, read):
            with card_sending_to(url) as peer, pytest.raises(ApplicationError) as caught:
                await ActivityEnvironment().run(a2a.call, a2a_call(peer.url))
        assert len(read) >= 1 and b"refund order 42" in read[0]
        assert caught.value.type == ErrorType.RESULT_NOT_KEPT
    finally:
        await egress.aclose()


@asynccontextmanager
async def pooled_mcp_session(tmp_path: Path) -> AsyncIterator[tuple[McpActivities, McpServer, int]]:
    """MCP activities holding a session to a streamable-HTTP server that has then stopped
    (its port free again), whose store fails every write; the server's spec and port."""
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    mcp = McpActivities(blobs=LocalBlobStore(tmp_path / "ok"), egress=egress)
    served = start_mcp_server("streamable-http")
    server = McpServer(name="crm", url=served.url, transport="http")
    try:
        first = await ActivityEnvironment().run(mcp.call, mcp_call(server, "echo", text="hi"))
        assert (first.status, first.content) == ("ok", "hi")
        served.stop()
        assert len(mcp.sessions.keys) == 1  # kept: the next call is sent on it
        mcp.blobs = broken_store(tmp_path)
        yield mcp, server, served.port
    finally:
        served.stop()
        await mcp.aclose()
        await egress.aclose()


def mcp_call(server: McpServer, tool: str, **arguments: Any) -> McpToolCall:
    return McpToolCall(
        run_id="r1",
        call_id="c1",
        server=server,
        tool=tool,
        arguments=arguments,
        large_result_bytes=100_000,
        scope=Scope(tenant="acme"),
        report_through_client=True,
    )


async def test_an_mcp_call_on_a_pooled_session_whose_connection_was_refused_did_not_run(
    tmp_path: Path,
) -> None:
    # Before: ResultNotKept. The session was leased, so its failure ("the session broke:
    # Connection closed", the SDK's words for the refused POST) was taken as a call that
    # may have run, though its tools/call never connected.
    said = r"^the call did not run \(its request never left\), and its outcome \(error\)"
    async with pooled_mcp_session(tmp_path) as (mcp, server, _):
        with pytest.raises(StoreUnavailable, match=said):
            await ActivityEnvironment().run(mcp.call, mcp_call(server, "charge", amount=1))


async def test_an_mcp_call_the_server_read_and_dropped_may_have_run(tmp_path: Path) -> None:
    # The converse: on the same pooled session, the tools/call is read whole by whatever
    # listens at the server's port now, and its connection dropped unanswered.
    async with (
        pooled_mcp_session(tmp_path) as (mcp, server, port),
        reading_then_dropping(port) as (_, read),
    ):
        with pytest.raises(ApplicationError) as caught:
            await ActivityEnvironment().run(mcp.call, mcp_call(server, "charge", amount=1))
    assert any(b'"tools/call"' in request for request in read)
    assert caught.value.type == ErrorType.RESULT_NOT_KEPT
