"""An answer to a wait an abort ended, while a call of its turn the abort may not cancel
still runs, is refused as the abort's: not as an id nothing waits on."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, Refused
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._waiting import state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_an_answer_to_a_wait_the_abort_ended_names_the_abort(harness: Harness) -> None:
    released = asyncio.Event()
    started = asyncio.Event()

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        return f"order {order_id} deleted"

    @harness.registry.register
    async def export_orders() -> str:
        """Export every order (slow)."""
        started.set()
        await released.wait()
        return "exported"

    harness.settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    spec = (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("export_orders", interruptible=False)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="c-del"),
            ToolCall("export_orders", {}, id="c-exp"),
        ),
        Reply.text("never asked for"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1, export all", scope=harness.scope)
        await state_when(
            harness.client, run, harness.scope, lambda s: bool(s.pending), what="the approval"
        )
        await asyncio.wait_for(started.wait(), 30)
        await harness.client.abort(run, scope=harness.scope, reason="wrong customer")

        # The abort's update completes once the Run took it, in the activation that ends
        # the approval's wait.
        with pytest.raises(Refused) as refused:
            await harness.client.approve(run, "c-del", scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        released.set()
        result = await harness.client.result(run, scope=harness.scope)
    assert not state.status.terminal, state.status  # refused before the Run settled
    assert refused.value.kind == "NotSuspended", refused.value
    said = str(refused.value)
    assert "'c-del' ended unanswered: the Run was aborted" in said, said
    assert "wrong customer" in said, said
    assert result.status is RunStatus.ABORTED
