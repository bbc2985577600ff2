"""A finished tool call survives a Temporal server outage of a minute (issue: hardening).

The call is running when the server stops; it finishes while the server is away; the
server comes back on the same database 61 s later. With psych's defaults (heartbeat timeout
of ``outage_seconds`` + margin, the worker's client retrying that long, heartbeats never
held back more than 5 s) the worker reports the result once the server is back, and the
Run records it ``ok`` instead of ``unknown``: the call ran once and the model got its
result.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from psych_runtime.specs import AgentBuilder, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers._worker_checks import DEFAULT_OUTAGE_SECONDS
from psych_runtime.workflows import RunStatus, ToolCallFinished

from ._outage import through_an_outage

pytestmark = pytest.mark.e2e

OUTAGE = DEFAULT_OUTAGE_SECONDS + 1.0


@pytest.mark.timeout(240)
async def test_a_call_that_finished_during_a_minute_long_outage_is_not_unknown(
    fake: FakeModel, tmp_path: Path
) -> None:
    registry = ToolRegistry()
    started, release = asyncio.Event(), asyncio.Event()
    charged: list[str] = []

    @registry.register
    async def charge(order_id: str) -> str:
        """Charge an order (not safe to repeat)."""
        started.set()
        await release.wait()
        charged.append(order_id)
        return f"charged {order_id}"

    spec = AgentBuilder("biller", registry=registry).model("fake-model").tool("charge").build()
    fake.enqueue(Reply.tool_calls(ToolCall("charge", {"order_id": "7"})), Reply.text("Done."))
    result, records = await through_an_outage(
        fake,
        tmp_path,
        spec,
        registry,
        in_flight=lambda: asyncio.wait_for(started.wait(), 20),
        outage=OUTAGE,
        meanwhile=release.set,  # the call finishes while nobody can hear of it
        settle_within=60,
    )
    assert result.status is RunStatus.COMPLETED, result.reason
    assert charged == ["7"]
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (finished.status, finished.content) == ("ok", "charged 7")
    assert len(fake.requests) == 2  # the model was told the result, not "unknown"
