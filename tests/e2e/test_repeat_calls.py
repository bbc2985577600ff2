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

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from psych_runtime.activities.contract import PolicyDecision, ToolInfo
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, SuspensionExpired, ToolCallFinished

from ._waiting import all_records, eventually
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


class _CountingPolicy:
    """Decides every call on its own (a ``psych.policy.decide`` activity each): allows it,
    and counts the decisions."""

    def __init__(self) -> None:
        self.decided = 0

    def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
        return None

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        self.decided += 1
        return PolicyDecision(decision="allow")


async def test_a_call_queued_behind_identical_calls_starts_nothing_after_an_abort(
    harness: Harness,
) -> None:
    # Three identical calls under repeat_call_threshold=2: the third waits for the first
    # two, which the abort cancels. It must start nothing then (no policy decision, no
    # call), as no call of the batch starts after an abort.
    ran: list[str] = []

    async def rep_slow(order_id: str) -> str:
        """Look an order up, slowly."""
        ran.append(order_id)
        await asyncio.sleep(60)
        return f"order {order_id} is delivered"

    harness.registry.register(rep_slow)
    policy = _CountingPolicy()
    harness.settings = dataclasses.replace(harness.settings, policy=policy)
    spec = (
        AgentBuilder("repabort", registry=harness.registry)
        .model("fake-model")
        .tool("rep_slow")
        .limits(repeat_call_threshold=2)
        .build()
    )
    same = [ToolCall("rep_slow", {"order_id": "7"}, id=f"r{n}") for n in range(3)]
    harness.fake.enqueue(Reply.tool_calls(*same), Reply.text("never asked for"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "where is order 7?", scope=harness.scope)

        async def running() -> bool:
            return len(ran) == 2

        await eventually(running, what="the first two calls to run")
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)

    assert result.status is RunStatus.ABORTED
    assert ran == ["7", "7"]
    assert policy.decided == 2  # the queued call asked the policy after the abort
    finished = [(r.call_id, r.status) for r in records if isinstance(r, ToolCallFinished)]
    assert finished == [("r0", "aborted"), ("r1", "aborted"), ("r2", "aborted")]
    assert len(harness.fake.requests) == 1


async def test_a_call_queued_behind_identical_calls_starts_nothing_after_an_expiry(
    harness: Harness,
) -> None:
    # The approval of another call of the turn expires while the first two identical calls
    # run: the Run settles ABANDONED once they are done. The third, queued behind them,
    # must not start a call then.
    released = asyncio.Event()
    ran: list[str] = []

    @harness.registry.register(destructive=True)
    def rep_delete(order_id: str) -> str:
        """Delete an order for good."""
        return f"order {order_id} deleted"

    async def rep_look(order_id: str) -> str:
        """Look an order up (each look another result)."""
        ran.append(order_id)
        look = len(ran)
        await released.wait()
        return f"order {order_id}, look {look}"

    harness.registry.register(rep_look)
    harness.settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    spec = (
        AgentBuilder("repexpiry", registry=harness.registry)
        .model("fake-model")
        .tool("rep_delete")
        .tool("rep_look")
        .limits(repeat_call_threshold=2)
        .suspension(approval_expires_seconds=1)
        .build()
    )
    same = [ToolCall("rep_look", {"order_id": "7"}, id=f"r{n}") for n in range(3)]
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("rep_delete", {"order_id": "1"}, id="c-del"), *same),
        Reply.text("never asked for"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1, find 7", scope=harness.scope)

        async def expired() -> bool:
            records = await all_records(harness.client, run, harness.scope)
            return any(isinstance(r, SuspensionExpired) for r in records)

        await eventually(expired, what="the approval's expiry")
        released.set()
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)

    assert result.status is RunStatus.ABANDONED
    assert ran == ["7", "7"]  # the third look started after the expiry
    finished = {r.call_id: r.status for r in records if isinstance(r, ToolCallFinished)}
    assert [finished[f"r{n}"] for n in range(3)] == ["ok", "ok", "rejected"]
