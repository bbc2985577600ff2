"""An abort sent while a turn's local tool call runs is taken, or told the Run settled.

The update waits for the task the local call holds. The task after it, carrying the
abort, was failed by the server when the next model call's answer landed meanwhile
(UnhandledCommand), and the server then refused the update (WorkflowNotReady): the
caller got that raw error, in 3 tries of 4 with an instant model, and the Run went on
unaborted. The client now sends the update again; it lands, or finds the Run settled."""

from __future__ import annotations

import asyncio

from psych_runtime.specs import AgentBuilder, Refused
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

STARTED: list[str] = []


async def weigh_slowly(parcel: str) -> str:
    """Weigh a parcel, slowly.

    Args:
        parcel: The parcel.
    """
    STARTED.append(parcel)
    await asyncio.sleep(1)
    return f"{parcel}: 2 kg"


async def test_an_abort_during_a_local_call_is_taken_or_told_the_run_settled(
    harness: Harness,
) -> None:
    harness.registry.register(weigh_slowly, idempotent=True, read_only=True, local_seconds=5.0)
    spec = (
        AgentBuilder("weigher-abort", registry=harness.registry)
        .model("fake-model")
        .tool("weigh_slowly")
        .build()
    )
    outcomes = []
    async with harness.worker():
        for attempt in range(4):  # the race is lost about one time in four
            STARTED.clear()
            harness.fake.enqueue(
                Reply.tool_calls(ToolCall("weigh_slowly", {"parcel": str(attempt)})),
                Reply.text("2 kg."),
            )
            run = await harness.client.dispatch(spec, "Weigh it.", scope=harness.scope)
            for _ in range(200):
                if STARTED:
                    break
                await asyncio.sleep(0.05)
            said = ""
            try:
                await harness.client.abort(run, scope=harness.scope, reason="enough")
            except Refused as err:  # the answer landed first: the Run had completed
                said = str(err)
            result = await harness.client.result(run, scope=harness.scope)
            if said:
                assert "has settled completed" in said, said
                assert result.status is RunStatus.COMPLETED, result.reason
            else:
                assert result.status is RunStatus.ABORTED, result.reason
            outcomes.append(result.status)
    assert len(outcomes) == 4
