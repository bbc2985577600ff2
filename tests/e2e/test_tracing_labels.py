"""What a real Run's spans carry: the tool call's status on a cancelled call's span."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._worker import run_worker
from psych_runtime.workflows import PsychClient, RunStatus

from .conftest import Harness
from .test_tracing import (  # noqa: F401 (pytest finds fixtures by name)
    Traced,
    _one,
    traced,
    traced_client,
)

pytestmark = pytest.mark.e2e


async def test_a_cancelled_tool_calls_span_says_cancelled(
    harness: Harness,
    traced: Traced,  # noqa: F811 (the fixture)
    traced_client: PsychClient,  # noqa: F811 (the fixture)
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=tenant)
    started = asyncio.Event()

    @harness.registry.register
    async def export_orders() -> str:
        """Export every order (slow)."""
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return "exported"

    spec = (
        AgentBuilder("exporter", registry=harness.registry)
        .model("fake-model")
        .tool("export_orders")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("export_orders", {}, id="c-exp")), Reply.text("never")
    )
    async with run_worker(traced_client.temporal, harness.settings):
        run = await traced_client.dispatch(spec, "export", scope=scope)
        await asyncio.wait_for(started.wait(), 30)
        await traced_client.abort(run, scope=scope, reason="wrong customer")
        result = await traced_client.result(run, scope=scope)
    assert result.status is RunStatus.ABORTED
    every = traced.spans.get_finished_spans()
    mine = [s for s in every if s.attributes and s.attributes.get("psych.tenant") == tenant]
    tool = _one(mine, "execute_tool export_orders")
    assert tool.attributes is not None
    assert tool.attributes.get("psych.tool.status") == "cancelled"
    root = _one(mine, "invoke_agent exporter")
    assert root.attributes is not None and root.attributes["psych.status"] == "aborted"
