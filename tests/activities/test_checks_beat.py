"""A tool call heartbeats while the tenant permits port is asked, not only once the call is
sent (pre hooks beat on their own): a port slower than the heartbeat timeout failed the
call as lost before it started."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.a2a import A2aActivities, A2aSettings
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    A2aToolCall,
    CodeToolCall,
    HttpToolCall,
    McpToolCall,
    ToolOutcome,
)
from psych_runtime.activities.egress import Egress, EgressSettings
from psych_runtime.activities.mcp import McpActivities, McpSettings
from psych_runtime.activities.tools import ToolActivities
from psych_runtime.specs import A2APeer, HttpTool, McpServer, PermitSource, Scope, ToolRegistry

SCOPE = Scope(tenant="acme")
BEAT = 0.01


class Heard:
    """The activity's heartbeats, and a pre hook that waits for three of them and denies."""

    def __init__(self) -> None:
        self.beats = 0
        self.three = asyncio.Event()

    def env(self) -> ActivityEnvironment:
        env = ActivityEnvironment()
        env.on_heartbeat = self.heard
        return env

    def heard(self, *details: Any) -> None:
        self.beats += 1
        if self.beats >= 3:
            self.three.set()

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        """Permits nothing, once three beats were heard (or says it heard none)."""
        # Waited for, not slept: without beats meanwhile it gives up and says so.
        try:
            await asyncio.wait_for(self.three.wait(), timeout=10)
        except TimeoutError:
            raise AssertionError("no heartbeat while the permits port was asked") from None
        return ()


def assert_checked(outcome: ToolOutcome) -> None:
    assert outcome.status == "denied", outcome
    assert "is not permitted to tenant 'acme'" in outcome.content, outcome


async def test_a_code_tool_call_beats_while_the_permits_port_answers(tmp_path: Path) -> None:
    heard = Heard()
    registry = ToolRegistry()

    @registry.register
    def wipe() -> str:
        """Wipe everything."""
        return "wiped"

    tools = ToolActivities(
        registry=registry,
        blobs=LocalBlobStore(tmp_path),
        permits=heard,
        heartbeat_seconds=BEAT,
    )
    call = CodeToolCall(
        run_id="r1", call_id="c1", tool="wipe", arguments={}, large_result_bytes=1000, scope=SCOPE
    )
    outcome: ToolOutcome = await heard.env().run(tools.code, call)
    assert_checked(outcome)


async def test_an_http_tool_call_beats_while_the_permits_port_answers(tmp_path: Path) -> None:
    heard = Heard()
    tools = ToolActivities(
        registry=ToolRegistry(),
        blobs=LocalBlobStore(tmp_path),
        permits=heard,
        heartbeat_seconds=BEAT,
    )
    tool = HttpTool(name="wipe", description="Wipe everything.", url="http://127.0.0.1:9/wipe")
    call = HttpToolCall(
        run_id="r1", call_id="c1", tool=tool, arguments={}, large_result_bytes=1000, scope=SCOPE
    )
    outcome: ToolOutcome = await heard.env().run(tools.http, call)
    assert_checked(outcome)


async def test_an_mcp_tool_call_beats_while_the_permits_port_answers(tmp_path: Path) -> None:
    heard = Heard()
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path),
        permits=heard,
        settings=McpSettings(heartbeat_seconds=BEAT),
    )
    call = McpToolCall(
        run_id="r1",
        call_id="c1",
        server=McpServer(name="tools", url="http://127.0.0.1:9/mcp", transport="http"),
        tool="wipe",
        arguments={},
        large_result_bytes=1000,
        scope=SCOPE,
    )
    try:
        outcome: ToolOutcome = await heard.env().run(mcp.call, call)
    finally:
        await mcp.aclose()
    assert_checked(outcome)


async def test_an_a2a_call_beats_while_the_permits_port_answers(tmp_path: Path) -> None:
    heard = Heard()
    a2a = A2aActivities(
        blobs=LocalBlobStore(tmp_path),
        egress=Egress(EgressSettings()),
        permits=heard,
        settings=A2aSettings(heartbeat_seconds=BEAT),
    )
    call = A2aToolCall(
        run_id="r1",
        call_id="c1",
        peer=A2APeer(name="desk", url="http://127.0.0.1:9/"),
        skill="wipe",
        name="desk__wipe",
        arguments={"message": "wipe everything"},
        large_result_bytes=1000,
        scope=SCOPE,
    )
    outcome: ToolOutcome = await heard.env().run(a2a.call, call)
    assert_checked(outcome)
