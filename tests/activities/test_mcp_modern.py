"""The MCP activities against a server of the 2026-07-28 protocol only
(``tests.mcp.modern_server``: no ``initialize`` handshake, stateless requests), in
Temporal's ActivityEnvironment: discovery and calls, an ``input_required`` round and its
retry with the answers, and the ``ttlMs`` / ``cacheScope`` of its listings in the
worker's catalogue cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    McpCatalog,
    McpCatalogInput,
    McpInputAnswers,
    McpToolCall,
    ToolOutcome,
)
from psych_runtime.activities.mcp import McpActivities, McpSettings, check_servers
from psych_runtime.specs import McpServer, Scope
from tests.mcp.modern_fixture import ModernMcpServer, start_modern_server

ALICE = Scope(tenant="acme", principal="alice")
BOB = Scope(tenant="acme", principal="bob")


@pytest.fixture(scope="module")
def modern() -> Iterator[ModernMcpServer]:
    server = start_modern_server()
    yield server
    server.stop()


@pytest.fixture
async def mcp(blobs: LocalBlobStore) -> AsyncIterator[McpActivities]:
    activities = McpActivities(blobs=blobs)
    try:
        yield activities
    finally:
        await activities.aclose()


def spec(server: ModernMcpServer) -> McpServer:
    return McpServer(name="shop", url=server.url)


async def catalog(mcp: McpActivities, server: McpServer, scope: Scope = ALICE) -> McpCatalog:
    given = McpCatalogInput(run_id="r1", turn=1, servers=(server,), scope=scope)
    result: McpCatalog = await ActivityEnvironment().run(mcp.list_tools, given)
    return result


async def call(
    mcp: McpActivities,
    server: McpServer,
    tool: str,
    arguments: dict[str, Any],
    input: McpInputAnswers | None = None,
) -> ToolOutcome:
    given = McpToolCall(
        run_id="r1",
        call_id=f"call-{tool}",
        server=server,
        tool=tool,
        arguments=arguments,
        large_result_bytes=100_000,
        scope=ALICE,
        input=input,
    )
    outcome: ToolOutcome = await ActivityEnvironment().run(mcp.call, given)
    return outcome


async def test_discovery_and_calls_on_a_stateless_server(
    mcp: McpActivities, modern: ModernMcpServer
) -> None:
    modern.reset()
    found = await catalog(mcp, spec(modern))
    assert [s.status for s in found.servers] == ["ok"], found.servers
    assert sorted(entry.name for entry in found.entries or ()) == ["shop__echo", "shop__order"]
    outcome = await call(mcp, spec(modern), "echo", {"text": "hi"})
    assert (outcome.status, outcome.content) == ("ok", "hi")
    state = modern.state()
    assert state["refused"] == 1, "one handshake refused, then stateless on the pooled session"
    assert state["calls"] == {"echo": 1}


async def test_publish_check_reaches_a_stateless_server(modern: ModernMcpServer) -> None:
    assert await check_servers([spec(modern)], ALICE, None) == {"shop": None}


async def test_input_required_round_then_the_retry_with_answers(
    mcp: McpActivities, modern: ModernMcpServer
) -> None:
    modern.reset()
    first = await call(mcp, spec(modern), "order", {"item": "tea"})
    assert first.status == "input_required", first
    asked = first.input_required
    assert asked is not None and asked.request_state
    assert [q.key for q in asked.questions] == ["quantity"]
    assert "How many tea should I order?" in asked.questions[0].text
    assert "quantity (integer, required)" in asked.questions[0].text
    assert modern.state()["orders"] == []

    answers = McpInputAnswers(
        requests=asked.requests, request_state=asked.request_state, answers={"quantity": "3"}
    )
    done = await call(mcp, spec(modern), "order", {"item": "tea"}, answers)
    assert (done.status, done.content) == ("ok", "ordered 3 x tea")
    state = modern.state()
    assert state["orders"] == [{"item": "tea", "quantity": 3}]
    retried = state["responses"][-1]
    assert retried["responses"]["quantity"]["action"] == "accept"
    assert retried["responses"]["quantity"]["content"] == {"quantity": 3}
    assert retried["request_state"] == '{"item": "tea"}'


async def test_an_answer_that_does_not_fit_the_form_is_not_sent(
    mcp: McpActivities, modern: ModernMcpServer
) -> None:
    modern.reset()
    first = await call(mcp, spec(modern), "order", {"item": "tea"})
    assert first.input_required is not None
    answers = McpInputAnswers(
        requests=first.input_required.requests,
        request_state=first.input_required.request_state,
        answers={"quantity": "a few"},
    )
    bad = await call(mcp, spec(modern), "order", {"item": "tea"}, answers)
    assert bad.status == "error"
    assert "'quantity' of 'quantity' must be integer, not 'a few'" in bad.content
    assert modern.state()["calls"] == {"order": 1}


async def lists_after(
    settings: McpSettings, blobs: LocalBlobStore, server: ModernMcpServer, *steps: Any
) -> int:
    """Run ``steps`` (a Scope: discover as it; a number: sleep that long) on fresh
    activities; how many ``tools/list`` requests reached the server."""
    server.reset()
    activities = McpActivities(blobs=blobs, settings=settings)
    try:
        for step in steps:
            if isinstance(step, Scope):
                found = await catalog(activities, spec(server), step)
                assert [s.status for s in found.servers] == ["ok"], found.servers
            else:
                await asyncio.sleep(step)
    finally:
        await activities.aclose()
    lists: int = server.state()["lists"]
    return lists


async def test_a_server_ttl_shorter_than_the_workers_is_honoured(blobs: LocalBlobStore) -> None:
    server = start_modern_server(list_ttl_ms=300, list_scope="private")
    try:
        settings = McpSettings(catalog_ttl_seconds=300)
        assert await lists_after(settings, blobs, server, ALICE, ALICE) == 1
        assert await lists_after(settings, blobs, server, ALICE, 0.6, ALICE) == 2
    finally:
        server.stop()


async def test_a_server_ttl_longer_than_the_workers_is_honoured(blobs: LocalBlobStore) -> None:
    server = start_modern_server(list_ttl_ms=60_000, list_scope="private")
    try:
        settings = McpSettings(catalog_ttl_seconds=0.2)
        assert await lists_after(settings, blobs, server, ALICE, 0.5, ALICE) == 1
        # The worker's bound on a server's TTL still applies.
        bounded = McpSettings(catalog_ttl_seconds=0.2, catalog_max_ttl_seconds=0.2)
        assert await lists_after(bounded, blobs, server, ALICE, 0.5, ALICE) == 2
    finally:
        server.stop()


async def test_a_private_listing_is_never_served_to_another_principal(
    blobs: LocalBlobStore,
) -> None:
    server = start_modern_server(list_ttl_ms=60_000, list_scope="private")
    try:
        assert await lists_after(McpSettings(), blobs, server, ALICE, BOB, ALICE, BOB) == 2
    finally:
        server.stop()


async def test_a_public_listing_is_shared_by_the_principals_of_a_tenant(
    blobs: LocalBlobStore,
) -> None:
    server = start_modern_server(list_ttl_ms=60_000, list_scope="public")
    try:
        assert await lists_after(McpSettings(), blobs, server, ALICE, BOB) == 1
        # Never across tenants.
        globex = Scope(tenant="globex", principal="alice")
        assert await lists_after(McpSettings(), blobs, server, ALICE, globex) == 2
    finally:
        server.stop()
