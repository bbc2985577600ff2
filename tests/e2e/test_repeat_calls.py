"""The repeat guard inside one turn: identical calls (same tool, same arguments) the model
makes together are held to ``repeat_call_threshold`` and ``repeat_call_hard_stop`` as
calls made one per turn are (SEMANTICS "Limits").

A call that could be refused once the identical calls before it in its turn have
returned waits for them, and is refused (not run) when they returned the same result the
threshold's number of times; its refusal counts toward the hard stop, which stops the Run.
Until the patch ``psych-repeat-calls-in-a-turn`` every call of such a turn ran, and the
hard stop came only with a refusal in a later turn.
"""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder, RunFailed
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from .conftest import Harness

pytestmark = pytest.mark.e2e

STOP = "repeat_call: rep_lookup was called 3 times with the same arguments and result"


def _respond(calls: int) -> Any:
    """The model: ``calls`` identical calls in its first turn, then an answer."""

    def respond(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "user":
            same = (ToolCall("rep_lookup", {"order_id": "7"}, id=f"r{n}") for n in range(calls))
            return Reply.tool_calls(*same)
        return Reply.text("order 7 is delivered")

    return respond


@pytest.mark.parametrize("local", [False, True], ids=["activity", "local"])
async def test_identical_calls_of_one_turn_stop_at_the_hard_stop(
    harness: Harness, local: bool
) -> None:
    ran: list[str] = []

    def rep_lookup(order_id: str) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id} is delivered"

    harness.registry.register(rep_lookup, idempotent=True, local_seconds=5.0 if local else None)
    spec = (
        AgentBuilder("repturn", registry=harness.registry)
        .model("fake-model")
        .tool("rep_lookup")
        .limits(repeat_call_threshold=2, repeat_call_hard_stop=3)
        .build()
    )
    # Five identical calls in one turn, past the hard stop of 3. They all ran, and the Run
    # went on to answer.
    harness.fake.responder = _respond(5)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "where is order 7?", scope=harness.scope)
        with pytest.raises(RunFailed, match=STOP):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records

    assert ran == ["7", "7"]
    finished = {r.call_id: r for r in records if isinstance(r, ToolCallFinished)}
    assert [(r.call_id, r.status) for r in finished.values()] == [("r0", "ok"), ("r1", "ok")] + [
        (f"r{n}", "refused") for n in (2, 3, 4)
    ]
    assert finished["r2"].content == (
        "not run: you called rep_lookup with these arguments 2 times and got the same result "
        "each time. Change approach instead of repeating the call."
    )
    assert len(harness.fake.requests) == 1  # stopped: no model call after the batch


async def test_identical_calls_of_one_turn_with_other_results_all_run(harness: Harness) -> None:
    # The guard counts the same result: identical calls whose results differ are no repeat,
    # in one turn as across turns.
    ran: list[str] = []

    def rep_lookup(order_id: str) -> str:
        """Look an order up."""
        ran.append(order_id)
        return f"order {order_id}, look {len(ran)}"

    harness.registry.register(rep_lookup)
    spec = (
        AgentBuilder("repother", registry=harness.registry)
        .model("fake-model")
        .tool("rep_lookup")
        .limits(repeat_call_threshold=2, repeat_call_hard_stop=3)
        .build()
    )
    harness.fake.responder = _respond(5)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "where is order 7?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records

    assert result.status is RunStatus.COMPLETED
    assert ran == ["7"] * 5
    finished = [r.status for r in records if isinstance(r, ToolCallFinished)]
    assert finished == ["ok"] * 5
