"""The MCP activities in Temporal's ActivityEnvironment against the real MCP test server
(``tests.mcp.server``, its own process on loopback), over streamable HTTP and SSE."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.blobs import canonical_json as _dumps
from psych_runtime.activities.contract import (
    McpCatalog,
    McpCatalogInput,
    McpSearchInput,
    McpToolCall,
    ToolDefinition,
    ToolOutcome,
)
from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.activities.mcp import McpActivities, McpSettings, check_servers
from psych_runtime.activities.mcp._catalog import McpTool
from psych_runtime.activities.secrets import SecretNotFound, StaticSecretResolver
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import McpServer, Scope
from tests._ports import free_port
from tests.mcp.fixture import McpTestServer, Transport, start_mcp_server
from tests.mcp.published import TOOLS as PUBLISHED_TOOLS
from tests.mcp.published import PublishedMcpServer, start_published_mcp_server
from tests.mcp.server import PIXEL_PNG, RESOURCE_TEXT, RESOURCE_URI

from ._hooks import noting_hooks

pytestmark = pytest.mark.long

SCOPE = Scope(tenant="acme")
TRANSPORTS = ["streamable-http", "sse"]
SECRET_ACME = "acme-bearer-5ecret-value"
SECRET_GLOBEX = "globex-bearer-0ther-value"


@pytest.fixture(params=TRANSPORTS)
def served(
    request: pytest.FixtureRequest, mcp_http_server: McpTestServer, mcp_sse_server: McpTestServer
) -> McpTestServer:
    return mcp_sse_server if request.param == "sse" else mcp_http_server


@pytest.fixture
async def mcp(blobs: LocalBlobStore) -> AsyncIterator[McpActivities]:
    activities = McpActivities(blobs=blobs, policy=RulePolicy(destructive="ask"))
    try:
        yield activities
    finally:
        await activities.aclose()


def spec_of(served: McpTestServer, name: str = "test", **fields: Any) -> McpServer:
    transport = "sse" if served.transport == "sse" else "http"
    return McpServer(name=name, url=served.url, transport=transport, **fields)


async def catalog(
    mcp: McpActivities, *servers: McpServer, scope: Scope = SCOPE, **fields: Any
) -> McpCatalog:
    given = McpCatalogInput(run_id="r1", turn=1, servers=servers, scope=scope, **fields)
    result: McpCatalog = await ActivityEnvironment().run(mcp.list_tools, given)
    return result


async def call(
    mcp: McpActivities,
    server: McpServer,
    tool: str,
    arguments: dict[str, Any],
    *,
    env: ActivityEnvironment | None = None,
    scope: Scope = SCOPE,
    large_result_bytes: int = 100_000,
) -> ToolOutcome:
    given = McpToolCall(
        run_id="r1",
        call_id=f"call-{tool}",
        server=server,
        tool=tool,
        arguments=arguments,
        large_result_bytes=large_result_bytes,
        scope=scope,
    )
    outcome: ToolOutcome = await (env or ActivityEnvironment()).run(mcp.call, given)
    return outcome


async def eventually(check: Callable[[], Any], within: float) -> Any:
    """Poll ``check`` (sync or async) every 50 ms until it returns something other than
    None or False; return that."""
    async with asyncio.timeout(within):
        while True:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            if value is not None and value is not False:
                return value
            await asyncio.sleep(0.05)


def stored_texts(root: Path) -> list[str]:
    """Every file under ``root``, as text."""
    return [path.read_text(errors="replace") for path in root.rglob("*") if path.is_file()]


async def definitions(blobs: LocalBlobStore, ref: str | None) -> list[dict[str, Any]]:
    assert ref is not None
    stored: list[dict[str, Any]] = json.loads(await blobs.get(ref))
    return stored


# --- discovery ------------------------------------------------------------------------------


async def test_discovery_narrows_names_and_annotates(
    served: McpTestServer, mcp: McpActivities, blobs: LocalBlobStore
) -> None:
    base = [ToolDefinition(name="zeta", description="a code tool", parameters={"type": "object"})]
    base_ref = await blobs.put(_dumps([item.model_dump(mode="json") for item in base]))
    server = spec_of(served, "test.srv", allow=("echo", "charge", "wipe", "look*"))
    result = await catalog(mcp, server, base_tools_ref=base_ref)

    assert result.servers[0].status == "ok"
    assert result.servers[0].tools == 4
    assert result.servers[0].cached is False
    assert result.entries is not None
    entries = {entry.name: entry for entry in result.entries}
    # Narrowed by the server's own names; named <server>__<tool> with '.' sanitised.
    assert sorted(entries) == [
        "test_srv__charge",
        "test_srv__echo",
        "test_srv__lookup",
        "test_srv__wipe",
    ]
    assert ("test_srv__echo", "test.srv", "echo") in result.renamed
    echo, charge, wipe = (
        entries["test_srv__echo"],
        entries["test_srv__charge"],
        entries["test_srv__wipe"],
    )
    assert (echo.kind, echo.server, echo.tool) == ("mcp", "test.srv", "echo")
    assert echo.info.effect == "read_only" and echo.safe_to_repeat
    # Unannotated is a write, not safe to repeat.
    assert charge.info.effect == "write" and not charge.safe_to_repeat
    assert wipe.info.effect == "destructive" and not wipe.safe_to_repeat
    # The Policy's fixed decision, by annotation (destructive="ask").
    assert wipe.policy is not None and wipe.policy.decision == "ask"
    assert echo.policy is not None and echo.policy.decision == "allow"
    # The stored definitions: base plus offered MCP tools, sorted by name.
    stored = await definitions(blobs, result.tools_ref)
    assert [item["name"] for item in stored] == [*sorted(entries), "zeta"]
    lookup = next(item for item in stored if item["name"] == "test_srv__lookup")
    assert lookup["parameters"]["properties"]["id"]["type"] == "string"


@pytest.mark.parametrize(
    ("read_only", "destructive", "effect", "decision"),
    [
        (True, True, "read_only", "allow"),
        (False, True, "destructive", "ask"),
        (None, True, "destructive", "ask"),
        (True, None, "read_only", "allow"),
    ],
)
def test_destructive_hint_counts_only_when_the_tool_is_not_read_only(
    mcp: McpActivities,
    read_only: bool | None,
    destructive: bool | None,
    effect: str,
    decision: str,
) -> None:
    """The MCP spec's ToolAnnotations: destructiveHint is meaningful only when readOnlyHint
    is false, so a tool marked both is read-only (``destructive="ask"`` does not ask)."""
    hints = mcp_types.ToolAnnotations(read_only_hint=read_only, destructive_hint=destructive)
    listed = mcp_types.Tool(name="archive", input_schema={"type": "object"}, annotations=hints)
    entry = mcp._entry("test", "test__archive", McpTool.of(listed))
    assert entry.info.effect == effect
    assert entry.policy is not None and entry.policy.decision == decision


async def test_an_unchanged_catalogue_returns_only_its_hash(
    served: McpTestServer, mcp: McpActivities
) -> None:
    server = spec_of(served)
    first = await catalog(mcp, server)
    assert first.entries is not None and first.tools_ref is not None

    again = await catalog(mcp, server, known_hash=first.catalog_hash)
    assert again.catalog_hash == first.catalog_hash
    assert again.entries is None and again.tools_ref is None and again.renamed == ()
    assert again.servers[0].cached is True
    # A few hundred bytes, against the whole catalogue the first time.
    assert len(again.model_dump_json()) < 400 < len(first.model_dump_json())

    stale = await catalog(mcp, server, known_hash="sha256:" + "0" * 64)
    assert stale.entries == first.entries and stale.tools_ref == first.tools_ref


async def test_the_cache_answers_until_the_server_says_its_list_changed(
    served: McpTestServer, mcp: McpActivities
) -> None:
    server = spec_of(served)
    first = await catalog(mcp, server)
    second = await catalog(mcp, server)
    assert (first.servers[0].cached, second.servers[0].cached) == (False, True)
    assert second.catalog_hash == first.catalog_hash

    assert served.add_tool("added_tool") >= 1

    async def relisted() -> McpCatalog | None:
        result = await catalog(mcp, server)
        return None if result.servers[0].cached else result

    third: McpCatalog = await eventually(relisted, within=10.0)
    assert third.entries is not None
    assert "test__added_tool" in {entry.name for entry in third.entries}
    assert third.catalog_hash != first.catalog_hash


async def test_a_turn_on_an_unchanged_cached_listing_reuses_the_catalogue_built_for_it(
    served: McpTestServer, mcp: McpActivities
) -> None:
    server = spec_of(served)
    given = McpCatalogInput(run_id="r1", turn=1, servers=(server,), scope=SCOPE)
    env = ActivityEnvironment()
    fresh = await env.run(mcp.resolve, given)
    cached = await env.run(mcp.resolve, given)
    again = await env.run(mcp.resolve, given.model_copy(update={"turn": 2}))
    assert [s.cached for s in (*fresh.servers, *cached.servers)] == [False, True]
    # The second turn built it from the cached listing; the third reused that build.
    assert again.entries is cached.entries and again.servers[0].cached
    assert again.catalog_hash == cached.catalog_hash == fresh.catalog_hash
    # Another tenant's turn is built for it (its blobs are its own).
    other = given.model_copy(update={"scope": Scope(tenant="other")})
    assert (await env.run(mcp.resolve, other)).entries is not cached.entries

    assert served.add_tool("memo_tool") >= 1

    async def rebuilt() -> McpCatalog | None:
        result = await env.run(mcp.resolve, given)
        return None if result.servers[0].cached else result

    changed: McpCatalog = await eventually(rebuilt, within=10.0)
    assert changed.entries is not None
    assert "test__memo_tool" in {entry.name for entry in changed.entries}


async def test_an_unreachable_server_is_a_status_naming_the_error(
    mcp: McpActivities, served: McpTestServer
) -> None:
    port = free_port()  # nothing listens on it
    gone = McpServer(name="gone", url=f"http://127.0.0.1:{port}/mcp", optional=True)
    result = await catalog(mcp, gone, spec_of(served))
    statuses = {status.server: status for status in result.servers}
    assert statuses["gone"].status == "unavailable"
    assert statuses["gone"].error is not None and "ConnectError" in statuses["gone"].error
    # The reachable server is still offered.
    assert statuses["test"].status == "ok"
    assert result.entries is not None
    assert all(entry.server == "test" for entry in result.entries)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


async def test_a_silent_server_is_unavailable_within_the_connect_timeout(
    blobs: LocalBlobStore, silent_port: int
) -> None:
    mcp = McpActivities(blobs=blobs, settings=McpSettings(connect_timeout_seconds=1.0))
    try:
        for transport in ("http", "sse"):
            silent = McpServer(
                name="silent", url=f"http://127.0.0.1:{silent_port}/mcp", transport=transport
            )
            started = time.monotonic()
            result = await catalog(mcp, silent)
            assert time.monotonic() - started < 4.0
            assert result.servers[0].status == "unavailable"
            assert result.servers[0].error is not None
            assert "1 s" in result.servers[0].error or "timed out" in result.servers[0].error
    finally:
        await mcp.aclose()


async def test_a_missing_credential_makes_the_server_unavailable(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    mcp = McpActivities(blobs=blobs, secrets=StaticSecretResolver({}))
    try:
        result = await catalog(mcp, spec_of(served, credential="crm-token"))
    finally:
        await mcp.aclose()
    assert result.servers[0].status == "unavailable"
    assert result.servers[0].error == "credential 'crm-token' is not available"


# --- calls ----------------------------------------------------------------------------------


async def test_a_call_returns_text_and_structured_content(
    served: McpTestServer, mcp: McpActivities, blobs: LocalBlobStore
) -> None:
    server = spec_of(served)
    echoed = await call(mcp, server, "echo", {"text": "hello there"})
    assert (echoed.status, echoed.content) == ("ok", "hello there")

    found = await call(mcp, server, "lookup", {"id": "42"})
    assert found.status == "ok"
    assert json.loads(found.content) == {"id": "42", "name": "record 42", "status": "active"}
    # The tool message the model is shown is stored with the call's id.
    message = json.loads(await blobs.get(found.message_ref))
    assert message["tool_call_id"] == "call-lookup"
    assert served.calls("lookup") == 1


async def test_images_and_resources_become_text(served: McpTestServer, mcp: McpActivities) -> None:
    server = spec_of(served)
    image = await call(mcp, server, "image", {})
    assert image.content == f"[image image/png, {len(PIXEL_PNG)} bytes]"
    resource = await call(mcp, server, "resource", {})
    assert resource.content == f"[resource {RESOURCE_URI}, text/plain]\n{RESOURCE_TEXT}"


async def test_is_error_is_an_error_outcome(served: McpTestServer, mcp: McpActivities) -> None:
    failed = await call(mcp, spec_of(served), "fail", {"reason": "the ledger is locked"})
    assert failed.status == "error"
    assert "the ledger is locked" in failed.content


async def test_a_tool_outside_allow_is_refused_without_reaching_the_server(
    served: McpTestServer, mcp: McpActivities
) -> None:
    refused = await call(mcp, spec_of(served, allow=("echo",)), "wipe", {})
    assert refused.status == "denied"
    assert "not granted" in refused.content
    assert served.calls("wipe") == 0


async def test_a_tool_outside_allow_is_refused_before_any_hook(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    # Checked after the pre hooks, the refusal was an error an on_error hook could
    # replace by a result: the security check comes first, and a denial runs no hook.
    seen: list[str] = []
    hooks = noting_hooks(seen)
    mcp = McpActivities(blobs=blobs, hooks=hooks)
    try:
        refused = await call(mcp, spec_of(served, allow=("echo",)), "wipe", {})
    finally:
        await mcp.aclose()
    assert (refused.status, seen) == ("denied", [])
    assert "not granted" in refused.content
    assert served.calls("wipe") == 0


async def test_a_large_result_is_a_preview_and_a_handle(
    served: McpTestServer, mcp: McpActivities, blobs: LocalBlobStore
) -> None:
    outcome = await call(mcp, spec_of(served), "big", {"size": 5000}, large_result_bytes=1000)
    assert outcome.truncated and outcome.size == 5000
    assert len(outcome.content) == 1000
    assert len(await blobs.get(outcome.result_ref)) == 5000
    message = json.loads(await blobs.get(outcome.message_ref))
    assert outcome.result_ref in message["content"]
    assert "read_tool_output" in message["content"]


async def test_progress_notifications_become_heartbeats(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    # A heartbeat interval longer than the call: every heartbeat seen is a progress one.
    mcp = McpActivities(blobs=blobs, settings=McpSettings(heartbeat_seconds=60.0))
    env = ActivityEnvironment()
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    try:
        outcome = await call(mcp, spec_of(served), "progress", {"steps": 3}, env=env)
    finally:
        await mcp.aclose()
    assert outcome.status == "ok"
    assert beats == [("1/3 step 1 of 3",), ("2/3 step 2 of 3",), ("3/3 step 3 of 3",)]


async def test_a_progress_message_echoing_the_credential_is_redacted_in_heartbeats(
    bearer_server: McpTestServer, blobs: LocalBlobStore
) -> None:
    """Progress messages become heartbeat details, which Temporal keeps (a pending
    activity's details, a heartbeat timeout's failure): what the server says there is
    redacted like its results. It went to Temporal as the server said it."""
    secrets = TenantSecrets({"acme": SECRET_ACME})
    mcp = McpActivities(blobs=blobs, secrets=secrets, settings=McpSettings(heartbeat_seconds=60.0))
    env = ActivityEnvironment()
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    server = spec_of(bearer_server, credential="crm-token")
    arguments = {"steps": 1, "note": f" token={SECRET_ACME}"}
    try:
        outcome = await call(mcp, server, "progress", arguments, env=env)
    finally:
        await mcp.aclose()
    assert outcome.status == "ok"
    assert beats == [("1/1 step 1 of 1 token=[REDACTED:crm-token]",)]


async def test_cancelling_the_activity_cancels_the_call_on_the_server(
    served: McpTestServer, mcp: McpActivities
) -> None:
    env = ActivityEnvironment()
    running = asyncio.create_task(call(mcp, spec_of(served), "slow", {"seconds": 30}, env=env))
    await eventually(lambda: served.calls("slow") == 1 or None, within=10.0)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    cancelled = await eventually(lambda: served.cancellations() or None, within=5.0)
    assert [entry["tool"] for entry in cancelled] == ["slow"]
    await eventually(lambda: served.interrupted() == ["slow"] or None, within=5.0)


async def test_the_call_timeout_is_an_error_and_cancels_the_call(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    mcp = McpActivities(blobs=blobs, settings=McpSettings(call_timeout_seconds=0.5))
    try:
        started = time.monotonic()
        outcome = await call(mcp, spec_of(served), "slow", {"seconds": 30})
        assert time.monotonic() - started < 5.0
    finally:
        await mcp.aclose()
    assert outcome.status == "error"
    assert "no result within 0.5 s" in outcome.content
    cancelled = await eventually(lambda: served.cancellations() or None, within=5.0)
    assert [entry["tool"] for entry in cancelled] == ["slow"]


# --- sessions and credentials ---------------------------------------------------------------


class TenantSecrets:
    """A SecretResolver giving each tenant its own value of one credential."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    async def resolve(self, scope: Scope, name: str) -> str:
        if name != "crm-token" or scope.tenant not in self.values:
            raise SecretNotFound(f"credential {name!r} is not configured")
        return self.values[scope.tenant]


@pytest.fixture(params=TRANSPORTS)
def bearer_server(request: pytest.FixtureRequest) -> Iterator[McpTestServer]:
    server = start_mcp_server(request.param, require_bearer=True)
    try:
        yield server
    finally:
        server.stop()


async def test_tenants_with_different_credentials_never_share_a_session(
    bearer_server: McpTestServer,
    blobs: LocalBlobStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = TenantSecrets({"acme": SECRET_ACME, "globex": SECRET_GLOBEX})
    mcp = McpActivities(blobs=blobs, secrets=secrets)
    server = spec_of(bearer_server, credential="crm-token")
    acme, globex = Scope(tenant="acme"), Scope(tenant="globex")
    outcomes: list[ToolOutcome] = []
    results: list[McpCatalog] = []
    try:
        for scope in (acme, globex, acme, globex):
            results.append(await catalog(mcp, server, scope=scope))
            outcomes.append(await call(mcp, server, "echo", {"text": "hi"}, scope=scope))
        logged = caplog.text
        # A server that echoes the credential back is redacted. (The SDK logs the request
        # at DEBUG, arguments and all, so this one is left out of the log check: here the
        # test itself put the secret into the arguments.)
        echoed = await call(mcp, server, "echo", {"text": f"token={SECRET_ACME}"}, scope=acme)
        outcomes.append(echoed)
        assert len(mcp.sessions.keys) == 2
        assert {key.tenant for key in mcp.sessions.keys} == {"acme", "globex"}
    finally:
        await mcp.aclose()
    assert echoed.content == "token=[REDACTED:crm-token]"
    assert all(result.servers[0].status == "ok" for result in results)
    assert [outcome.content for outcome in outcomes[:4]] == ["hi"] * 4

    bearers = bearer_server.bearers()
    # One session per tenant, each seeing only its own bearer.
    assert sorted(map(tuple, bearers.values())) == [(SECRET_ACME,), (SECRET_GLOBEX,)]

    # The secrets appear in no outcome, result, blob or log line.
    texts = [outcome.model_dump_json() for outcome in outcomes]
    texts += [result.model_dump_json() for result in results]
    texts += await asyncio.to_thread(stored_texts, tmp_path)
    texts.append(logged)
    for secret in (SECRET_ACME, SECRET_GLOBEX):
        assert not any(secret in text for text in texts)
        assert secret not in repr(mcp.sessions.keys)


async def test_the_pool_is_bounded_and_closes_idle_sessions(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    settings = McpSettings(max_sessions=1, idle_seconds=0.5, catalog_ttl_seconds=0)
    mcp = McpActivities(blobs=blobs, settings=settings)
    server = spec_of(served)
    try:
        await catalog(mcp, server, scope=Scope(tenant="acme"))
        await catalog(mcp, server, scope=Scope(tenant="globex"))
        # The least recently used (acme's) was closed to make room.
        assert [key.tenant for key in mcp.sessions.keys] == ["globex"]
        await eventually(lambda: not mcp.sessions.keys or None, within=5.0)
    finally:
        await mcp.aclose()


async def test_a_broken_session_is_dropped_and_the_server_reported_unavailable(
    blobs: LocalBlobStore,
) -> None:
    mcp = McpActivities(blobs=blobs, settings=McpSettings(catalog_ttl_seconds=0))
    served = start_mcp_server("sse")
    try:
        server = spec_of(served)
        assert (await catalog(mcp, server)).servers[0].status == "ok"
        assert len(mcp.sessions.keys) == 1
        served.stop()
        result = await catalog(mcp, server)
        assert result.servers[0].status == "unavailable"
        await eventually(lambda: not mcp.sessions.keys or None, within=10.0)
    finally:
        served.stop()
        await mcp.aclose()


class CuttingProxy:
    """A loopback TCP forwarder to a server; ``cut()`` drops every open connection, as a
    restarted server or a dropped network would."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await self._server.wait_closed()

    def cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self._writers.update({writer, upstream_writer})

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.transport.abort()

        await asyncio.gather(pump(reader, upstream_writer), pump(upstream_reader, writer))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_session_its_server_lost_is_replaced_on_next_use(
    transport: Transport, blobs: LocalBlobStore
) -> None:
    # The server behind one address restarts: the old process's connections are cut and
    # the new one knows none of its sessions (streamable HTTP answers 404 to them).
    old, new = start_mcp_server(transport), start_mcp_server(transport)
    mcp = McpActivities(blobs=blobs, settings=McpSettings(catalog_ttl_seconds=0))
    try:
        async with CuttingProxy(old.port) as proxy:
            path = "/sse" if transport == "sse" else "/mcp"
            server = McpServer(
                name="test",
                url=f"http://127.0.0.1:{proxy.port}{path}",
                transport="sse" if transport == "sse" else "http",
            )
            assert (await catalog(mcp, server)).servers[0].status == "ok"
            proxy.target = new.port
            proxy.cut()
            old.stop()
            # The next use connects afresh and answers: no turn is lost to the restart.
            again = await catalog(mcp, server)
            assert again.servers[0].status == "ok", again.servers[0].error
            assert len(mcp.sessions.keys) == 1
            echoed = await call(mcp, server, "echo", {"text": "still here"})
            assert echoed.content == "still here"
            assert new.calls("echo") == 1
    finally:
        await mcp.aclose()
        new.stop()
        old.stop()


async def test_the_catalogue_cache_expires_after_its_ttl(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    mcp = McpActivities(blobs=blobs, settings=McpSettings(catalog_ttl_seconds=0.5))
    try:
        server = spec_of(served)
        cached = [(await catalog(mcp, server)).servers[0].cached for _ in range(2)]
        await asyncio.sleep(0.6)
        cached.append((await catalog(mcp, server)).servers[0].cached)
    finally:
        await mcp.aclose()
    assert cached == [False, True, False]


async def test_calls_not_safe_to_repeat_get_the_outage_heartbeat_timeout(
    served: McpTestServer, blobs: LocalBlobStore
) -> None:
    mcp = McpActivities(blobs=blobs, outage_seconds=60.0)
    try:
        result = await catalog(mcp, spec_of(served, allow=("charge", "echo")))
    finally:
        await mcp.aclose()
    assert result.entries is not None
    timeouts = {entry.name: entry.heartbeat_timeout_seconds for entry in result.entries}
    assert timeouts == {"test__charge": 70.0, "test__echo": None}


# --- deferral and search --------------------------------------------------------------------


@pytest.fixture(scope="module", params=TRANSPORTS)
def filler_server(request: pytest.FixtureRequest) -> Iterator[McpTestServer]:
    server = start_mcp_server(request.param, filler=40)
    try:
        yield server
    finally:
        server.stop()


async def test_a_large_catalogue_is_deferred_and_found_by_search(
    filler_server: McpTestServer, mcp: McpActivities, blobs: LocalBlobStore
) -> None:
    server = spec_of(filler_server, "big")
    small = spec_of(filler_server, "small", allow=("echo",))
    first = await catalog(mcp, server, small)
    statuses = {status.server: status for status in first.servers}
    assert statuses["big"].status == "deferred" and statuses["big"].tools == 0
    assert statuses["small"].status == "ok" and statuses["small"].tools == 1
    assert first.entries is not None
    assert sorted(entry.name for entry in first.entries) == ["search_mcp_tools", "small__echo"]
    search_entry = next(entry for entry in first.entries if entry.name == "search_mcp_tools")
    assert search_entry.kind == "builtin" and search_entry.policy is not None
    stored = await definitions(blobs, first.tools_ref)
    search_tool = next(item for item in stored if item["name"] == "search_mcp_tools")
    assert search_tool["parameters"]["required"] == ["query"]
    assert search_tool["parameters"]["properties"]["server"]["enum"] == ["big"]

    catalog_hash = statuses["big"].catalog_hash
    assert catalog_hash is not None
    found = await ActivityEnvironment().run(
        mcp.search_tools,
        McpSearchInput(
            run_id="r1",
            call_id="call-search",
            servers=(server,),
            catalogs={"big": catalog_hash},
            query="NUMBER 007",
            limit=3,
            large_result_bytes=100_000,
            scope=SCOPE,
        ),
    )
    assert found.found[0] == "big__filler_007"
    assert len(found.found) == 3
    assert "big__filler_007: Filler tool number 007" in found.outcome.content
    assert '"text"' in found.outcome.content  # the parameter schema

    loaded = await catalog(mcp, server, small, loaded=found.found[:1])
    statuses = {status.server: status for status in loaded.servers}
    assert statuses["big"].status == "deferred" and statuses["big"].tools == 1
    assert loaded.entries is not None
    names = sorted(entry.name for entry in loaded.entries)
    assert names == ["big__filler_007", "search_mcp_tools", "small__echo"]
    assert (await call(mcp, server, "filler_007", {"text": "x"})).content == "filler_007: x"


async def test_preload_overrides_the_budget(
    filler_server: McpTestServer, mcp: McpActivities
) -> None:
    listed = await catalog(mcp, spec_of(filler_server, preload=True))
    assert listed.servers[0].status == "ok" and listed.servers[0].tools > 40
    deferred = await catalog(mcp, spec_of(filler_server, allow=("echo",), preload=False))
    assert deferred.servers[0].status == "deferred"
    assert deferred.entries is not None
    assert [entry.name for entry in deferred.entries] == ["search_mcp_tools"]


async def test_a_search_without_a_catalogue_says_so(mcp: McpActivities) -> None:
    server = McpServer(name="big", url="http://127.0.0.1:1/mcp")
    result = await ActivityEnvironment().run(
        mcp.search_tools,
        McpSearchInput(
            run_id="r1",
            call_id="c",
            servers=(server,),
            query="anything",
            large_result_bytes=1000,
            scope=SCOPE,
        ),
    )
    assert result.found == ()
    assert "not available" in result.outcome.content


# --- publish-time check ---------------------------------------------------------------------


async def test_check_servers_names_each_unreachable_server(served: McpTestServer) -> None:
    port = free_port()  # nothing listens on it
    servers = [
        spec_of(served, "up"),
        McpServer(name="down", url=f"http://127.0.0.1:{port}/mcp"),
        spec_of(served, "locked", credential="missing"),
    ]
    answers = await check_servers(servers, SCOPE, StaticSecretResolver({}))
    assert answers["up"] is None
    assert answers["down"] is not None and "ConnectError" in answers["down"]
    assert answers["locked"] == "credential 'missing' is not available"


# --- a server nobody here wrote ---------------------------------------------------------------


@pytest.fixture(params=TRANSPORTS)
async def published(request: pytest.FixtureRequest) -> AsyncIterator[PublishedMcpServer]:
    server = await asyncio.to_thread(start_published_mcp_server, request.param)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_published_server_is_discovered_and_called(
    published: PublishedMcpServer, blobs: LocalBlobStore
) -> None:
    # The proxy starts the time server on the first connection: on a busy machine that
    # takes longer than the default connect bound.
    mcp = McpActivities(blobs=blobs, settings=McpSettings(connect_timeout_seconds=30.0))
    try:
        await published_server_is_discovered_and_called(published, mcp)
    finally:
        await mcp.aclose()


async def published_server_is_discovered_and_called(
    published: PublishedMcpServer, mcp: McpActivities
) -> None:
    transport = "sse" if published.transport == "sse" else "http"
    server = McpServer(name="time", url=published.url, transport=transport)
    result = await catalog(mcp, server)
    assert result.servers[0].status == "ok", result.servers[0].error
    assert result.entries is not None
    entries = {entry.name: entry for entry in result.entries}
    assert sorted(entries) == sorted(f"time__{tool}" for tool in PUBLISHED_TOOLS)
    assert entries["time__get_current_time"].info.effect == "read_only"

    converted = await call(
        mcp,
        server,
        "convert_time",
        {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
    )
    assert converted.status == "ok"
    assert json.loads(converted.content)["target"]["datetime"].endswith("T21:00:00+09:00")
    wrong = await call(mcp, server, "get_current_time", {"timezone": "Not/AZone"})
    assert wrong.status == "error"


async def test_a_session_connects_through_the_egress_policy_on_both_transports(
    mcp_http_server: McpTestServer, mcp_sse_server: McpTestServer, blobs: LocalBlobStore
) -> None:
    from psych_runtime.activities.egress import Egress, EgressSettings

    egress = Egress(EgressSettings())  # the default: a Spec's URL may not reach loopback
    mcp = McpActivities(blobs=blobs, egress=egress)
    try:
        for served in (mcp_http_server, mcp_sse_server):
            transport = "sse" if served.transport == "sse" else "http"
            server = McpServer(name="local", url=served.url, transport=transport)
            result = await catalog(mcp, server)
            (status,) = result.servers
            assert (status.status, status.error) == (
                "unavailable",
                "EgressDenied: egress refused: 127.0.0.1: loopback addresses are refused for URLs "
                "from a Spec unless the operator allows them (egress allow list: "
                "PSYCH_EGRESS_ALLOW or the settings file)",
            )
        assert egress.connects == 0
    finally:
        await mcp.aclose()
        await egress.aclose()


# --- replies over the egress policy's bound -------------------------------------------------

BOUND = 20_000
"""Over every reply of ``json_server`` but ``big``'s (and its tools/list with filler)."""


@pytest.fixture(scope="module")
def json_server() -> Iterator[McpTestServer]:
    """A server answering POSTs with JSON bodies (read whole, so bounded)."""
    served = start_mcp_server("streamable-http", json_response=True)
    try:
        yield served
    finally:
        served.stop()


def bounded_egress(bound: int = BOUND) -> Egress:
    rules = EgressRules(allow_cidrs=("127.0.0.0/8",))
    return Egress(EgressSettings(rules=rules, max_response_bytes=bound))


def names_the_bound(text: str | None, served: McpTestServer, bound: int = BOUND) -> bool:
    assert text is not None
    return (
        "response too large" in text
        and f"{served.url}" in text
        and f"over {bound} bytes" in text
        and "max_response_bytes" in text
    )


async def test_a_reply_over_the_bound_is_a_tool_error_naming_the_server_and_the_bound(
    json_server: McpTestServer, blobs: LocalBlobStore
) -> None:
    mcp = McpActivities(blobs=blobs, egress=bounded_egress())
    try:
        big = await call(mcp, spec_of(json_server), "big", {"size": 50_000})
        assert big.status == "error"
        assert big.content.startswith("MCP server 'test', tool 'big': ")
        assert names_the_bound(big.content, json_server), big.content
        # The session it ended is dropped: the next call connects afresh.
        echoed = await call(mcp, spec_of(json_server), "echo", {"text": "hi"})
        assert (echoed.status, echoed.content) == ("ok", "hi")
    finally:
        await mcp.aclose()


async def test_a_listing_over_the_bound_makes_the_server_unavailable_naming_the_bound(
    blobs: LocalBlobStore,
) -> None:
    served = start_mcp_server("streamable-http", json_response=True, filler=60)
    egress = bounded_egress()
    mcp = McpActivities(blobs=blobs, egress=egress)
    try:
        result = await catalog(mcp, spec_of(served, optional=True))
        assert result.servers[0].status == "unavailable"
        assert names_the_bound(result.servers[0].error, served), result.servers[0].error
        # What --check-connections says of it.
        checked = await check_servers([spec_of(served)], SCOPE, None, egress=egress)
        assert names_the_bound(checked["test"], served), checked["test"]
    finally:
        await mcp.aclose()
        await egress.aclose()
        served.stop()
