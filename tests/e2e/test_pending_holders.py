"""One pending id in two Runs: a parent's own approval and its subagent's, under the same
call id. Each is answered through the parent, the child's by naming its holder."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, Refused
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RefusalKind, RunHandle, RunState, RunStatus

from ._waiting import state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


def two_waiting(state: RunState) -> bool:
    return len([p for p in state.pending if p.id == "c1"]) == 2


async def test_an_id_pending_in_parent_and_child_is_answered_by_naming_its_holder(
    harness: Harness,
) -> None:
    deleted: list[str] = []

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    helper = (
        AgentBuilder("helper", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .build()
    )
    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .subagent("helper", "Deletes the orders it is told to delete.", helper)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        if "delegate" in tools:  # the lead
            if last["role"] == "user":
                return Reply.tool_calls(
                    ToolCall("delete_order", {"order_id": "1"}, id="c1"),
                    ToolCall("delegate", {"agent": "helper", "task": "delete 2"}, id="d1"),
                )
            return Reply.text("lead done")
        if last["role"] == "user":  # the helper, under the same call id
            return Reply.tool_calls(ToolCall("delete_order", {"order_id": "2"}, id="c1"))
        return Reply.text("helper done")

    harness.fake.responder = respond
    async with harness.worker():
        run: RunHandle = await harness.client.dispatch(spec, "delete 1 and 2", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, two_waiting, what="both approvals"
        )
        (child,) = {p.run for p in state.pending if p.id == "c1" and p.run is not None}
        assert child is not None
        # The child's, named by its holder: before, the parent's own was taken.
        done = await harness.client.approve(run, "c1", scope=harness.scope, held_by=child)
        assert done.outcome == "approved"
        with pytest.raises(Refused) as unknown:
            await harness.client.approve(run, "c1", scope=harness.scope, held_by="psych-acme-x")
        assert unknown.value.kind == RefusalKind.UNKNOWN_PENDING
        assert "held by Run 'psych-acme-x'" in str(unknown.value)
        # Without a holder, the parent's own comes first.
        await harness.client.approve(run, "c1", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        with pytest.raises(Refused):
            await harness.client.approve(run, "c1", scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert sorted(deleted) == ["1", "2"]
