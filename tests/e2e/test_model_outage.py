"""A model answer that arrived while the Temporal server was away is kept, not bought twice
(issue 26, item 6); a summariser's answer too.

The model call is streaming when the server stops; the provider (the fake model) finishes
its answer while the server is away; the server comes back on the same port and database
after an outage shorter than the worker's tolerance (``outage_seconds``, here ``TOLERANCE``
rather than the default minute, which the last test pins: the same code, a shorter wait).
The Run records that answer: the provider saw one request, not two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from psych_runtime.activities.contract import MODEL_CALL, MODEL_COMPACT
from psych_runtime.activities.tools import OUTAGE_MARGIN
from psych_runtime.specs import AgentBuilder, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from psych_runtime.workers._worker_checks import DEFAULT_OUTAGE_SECONDS
from psych_runtime.workflows import (
    CompactionApplied,
    ModelCallFinished,
    RunStatus,
)
from psych_runtime.workflows.kernel._activity_calls import OPTIONS
from psych_runtime.workflows.kernel._model_lost import MODEL_LOST_AFTER

from ._outage import through_an_outage
from ._waiting import eventually

pytestmark = pytest.mark.e2e

TOLERANCE = 25.0
"""The workers' ``outage_seconds``: their model calls' heartbeat timeout is 35 s, 20 s more
than the outage for the last beat's throttle, the server's restart and the client's backoff."""
OUTAGE = 15.0
"""Inside the tolerance, and longer than the margin alone (the 10 s heartbeat timeout of a
worker tolerating no outage, which would lose the call)."""
ANSWERED_AFTER = 3.0
"""Seconds the provider takes to finish its answer once the call is in flight."""
SMALL = FakeUsage(input_tokens=10, output_tokens=5)
BIG = FakeUsage(input_tokens=300, output_tokens=5)
"""Over the compaction trigger of 100 tokens."""


def provider_has(fake: FakeModel, requests: int) -> Callable[[], Awaitable[None]]:
    """Waits until the provider has ``requests`` requests, the last one the call in flight."""

    async def in_flight() -> None:
        async def seen() -> bool:
            return len(fake.requests) == requests

        await eventually(seen, within=30, what="the model call to be in flight")

    return in_flight


@pytest.mark.timeout(300)
async def test_an_answer_that_arrived_during_an_outage_is_not_bought_again(
    fake: FakeModel, tmp_path: Path
) -> None:
    spec = AgentBuilder("outage-answers").model("fake-model").build()
    # The stream starts, goes silent while the server stops, then finishes. A second
    # request (the call sent again) would get the second reply.
    fake.enqueue(
        Reply.stall(ANSWERED_AFTER, then=Reply.text("The first and only answer.")),
        Reply.text("bought twice"),
    )
    result, records = await through_an_outage(
        fake,
        tmp_path,
        spec,
        ToolRegistry(),
        in_flight=provider_has(fake, 1),
        outage=OUTAGE,
        outage_seconds=TOLERANCE,
    )
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "The first and only answer."
    assert len(fake.requests) == 1
    assert len([r for r in records if isinstance(r, ModelCallFinished)]) == 1


@pytest.mark.timeout(300)
async def test_a_summary_that_arrived_during_an_outage_is_not_bought_again(
    fake: FakeModel, tmp_path: Path
) -> None:
    registry = ToolRegistry()

    @registry.register
    def lookup_order(order_id: str) -> str:
        """Look up an order.

        Args:
            order_id: The order's id.
        """
        return f"order {order_id}: shipped"

    spec = (
        AgentBuilder("outage-summaries", registry=registry)
        .model("fake-model")
        .tool(lookup_order)
        .compaction(100, keep_recent_turns=1, max_summary_tokens=64)
        .build()
    )
    # Turn 2 goes over the trigger, so turn 1 is summarised before turn 3: the summariser
    # is the third request, and it is in flight while the server is away.
    fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "41"}), usage=SMALL),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}), usage=BIG),
        Reply.stall(ANSWERED_AFTER, then=Reply.text("Asked about order 41; it shipped.")),
        Reply.text("Both orders shipped."),
        Reply.text("bought twice"),
    )
    result, records = await through_an_outage(
        fake,
        tmp_path,
        spec,
        registry,
        in_flight=provider_has(fake, 3),
        outage=OUTAGE,
        outage_seconds=TOLERANCE,
    )
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Both orders shipped."
    assert len(fake.requests) == 4
    applied = [r for r in records if isinstance(r, CompactionApplied)]
    assert [r.summary_preview for r in applied] == ["Asked about order 41; it shipped."]


def test_a_model_call_is_not_given_up_on_within_the_documented_outage() -> None:
    """Its heartbeat timeout outlasts the outage a worker survives (plus the margin a
    held-back heartbeat and the server's restart take); the summariser's call too."""
    assert OPTIONS[MODEL_CALL].heartbeat == MODEL_LOST_AFTER
    assert OPTIONS[MODEL_COMPACT].heartbeat == MODEL_LOST_AFTER
    assert MODEL_LOST_AFTER.total_seconds() == DEFAULT_OUTAGE_SECONDS + OUTAGE_MARGIN
