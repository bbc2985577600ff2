"""Interrupts and failure paths at their edges: aborts mid-call and mid-wait, workflow
cancellation, per-call policies, bad built-in arguments, oversized record pages."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from psych_runtime.activities.contract import PolicyDecision, ToolInfo
from psych_runtime.specs import AgentBuilder, RunFailed, Scope, Version
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    AGENT_RUN,
    AgentRunInput,
    ModelCallStarted,
    RunSettled,
    RunStatus,
    TokenDelta,
    ToolCallFinished,
)
from psych_runtime.workflows.client._client import CANCELLED_STATE_TIMEOUT

from ._waiting import eventually
from .conftest import Harness
from .test_suspensions import orders_agent, suspended

pytestmark = pytest.mark.e2e


async def test_abort_during_a_model_call_settles_without_another_call(harness: Harness) -> None:
    spec = AgentBuilder("slow").model("fake-model").build()
    harness.fake.enqueue(Reply.stall(30, after_chunks=1))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)

        async def calling() -> bool:
            return len(harness.fake.requests) == 1

        await eventually(calling, what="the model call")
        report = await harness.client.report(run, scope=harness.scope)
        (call,) = report.model_calls  # open: neither answered nor failed
        assert (call.model, call.ok, call.error) == ("fake-model", None, None)
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    assert len(harness.fake.requests) == 1
    # The call the abort cut off is in the report (it was missing while the totals
    # counted it), failed with no answer.
    assert result.totals.model_calls == len(report.model_calls) == 1
    (call,) = report.model_calls
    assert (call.model, call.attempt, call.ok, call.usage) == ("fake-model", 1, False, None)
    assert call.error == (
        "no answer: the Run settled aborted while the call was open (aborted by tester: enough)"
    )


async def test_abort_cuts_the_providers_answer_off(harness: Harness) -> None:
    # The model activity learns of an abort at its next heartbeat, which came a third of
    # its 70 s heartbeat timeout apart: the provider went on writing (and billing) an
    # aborted Run's answer for up to 23 s; a stall of 15 s was sent whole.
    spec = AgentBuilder("slow").model("fake-model").build()
    rest = Reply.text("word " * 20, chunk_size=5, chunk_seconds=0.05)
    harness.fake.enqueue(Reply.stall(15, after_chunks=1, then=rest))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        # A follower reads the first piece once a heartbeat has shown the relay's address:
        # the abort comes after the call's first heartbeat.
        async for item in harness.client.stream(run, scope=harness.scope, deltas=True):
            if isinstance(item, TokenDelta):
                break
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)

        async def ended() -> bool:
            return harness.fake.streams_cut + harness.fake.streams_whole == 1

        await eventually(ended, what="the provider's stream to end", within=60)
    assert result.status is RunStatus.ABORTED
    assert (harness.fake.streams_cut, harness.fake.streams_whole) == (1, 0)


async def test_abort_during_a_retry_wait_starts_no_new_call(harness: Harness) -> None:
    spec = AgentBuilder("waiting").model("fake-model").build()
    harness.fake.enqueue(Reply.error(429, retry_after=60), Reply.text("too late"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)

        async def limited() -> bool:
            records = (await harness.client.records(run, scope=harness.scope)).records
            return any(getattr(r, "status", None) == 429 for r in records)

        await eventually(limited, what="the 429")
        await harness.client.abort(run, scope=harness.scope)
        async with asyncio.timeout(10):  # not the 60 s Retry-After
            result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.ABORTED
    assert len(harness.fake.requests) == 1
    assert len([r for r in records if isinstance(r, ModelCallStarted)]) == 1


async def test_abort_records_every_call_of_the_turn(harness: Harness) -> None:
    deleted: list[str] = []
    spec_base = orders_agent(harness, deleted)
    finished: list[str] = []

    @harness.registry.register
    async def slow_write(record: str) -> str:
        """Write a record, which must not be cut off halfway."""
        await asyncio.sleep(1.5)
        finished.append(record)
        return "written"

    spec = (
        AgentBuilder("mixed", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("slow_write", interruptible=False)
        .build()
    )
    assert spec_base.tools[0].name == "delete_order"
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="d1"),
            ToolCall("slow_write", {"record": "r"}, id="w1"),
        )
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await suspended(harness, run)
        await harness.client.abort(run, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    statuses = {c.call_id: c.status for c in report.tool_calls}
    assert statuses == {"d1": "aborted", "w1": "ok"}  # the write finished and was recorded
    assert finished == ["r"]
    assert deleted == []


async def test_cancelling_the_workflow_mid_model_call_settles_it(harness: Harness) -> None:
    spec = AgentBuilder("cancelled").model("fake-model").build()
    harness.fake.enqueue(Reply.stall(30, after_chunks=1))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)

        async def calling() -> bool:
            return len(harness.fake.requests) == 1

        await eventually(calling, what="the model call")
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def closed() -> bool:
            return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

        await eventually(closed, what="the workflow to end cancelled")
        state = await harness.client.status(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]
        # Its result is what it settled with, as its state and report say: it was
        # RunFailed('Workflow cancelled'), a failure the Run never recorded.
        result = await harness.client.result(run, scope=harness.scope)
    assert state.status is RunStatus.ABORTED
    assert isinstance(records[-1], RunSettled)
    assert (result.run_id, result.status, result.reason, result.totals) == (
        run.run_id,
        RunStatus.ABORTED,
        "cancelled: the workflow was cancelled by its parent or an operator",
        records[-1].totals,
    )
    assert result.totals.model_calls == 1
    assert len(harness.fake.requests) == 1  # a cancellation is not a model failure to retry
    # With no worker to tell what it settled with, its result is a failure that says so
    # (within a bound), not a query's error nor a wait for a worker that never comes.
    started = time.monotonic()
    with pytest.raises(RunFailed, match="was cancelled; what it settled with could not be read"):
        await harness.client.result(run, scope=harness.scope)
    assert time.monotonic() - started < CANCELLED_STATE_TIMEOUT.total_seconds() + 5


class PerCallPolicy:
    """Decides per call: deletes of order 13 are denied, others allowed."""

    def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
        return None

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        if arguments.get("order_id") == "13":
            return PolicyDecision(decision="deny", reason="order 13 is protected")
        return PolicyDecision(decision="allow")


async def test_a_per_call_policy_decides_each_call(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.settings.policy = PerCallPolicy()
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "12"}),
            ToolCall("delete_order", {"order_id": "13"}),
        ),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 12 and 13", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert deleted == ["12"]
    assert [c.status for c in report.tool_calls] == ["ok", "denied"]
    assert "order 13 is protected" in (report.tool_calls[1].result or "")


class BrokenPolicy(PerCallPolicy):
    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        return "allow"  # type: ignore[return-value]  # a policy that answers the wrong type


async def test_a_policy_answering_nonsense_is_a_deny_not_a_stuck_run(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.settings.policy = BrokenPolicy()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"})), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1", scope=harness.scope)
        async with asyncio.timeout(20):
            await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert deleted == []
    assert report.tool_calls[0].status == "denied"


async def test_bad_read_tool_output_arguments_are_the_models_error(harness: Harness) -> None:
    spec = AgentBuilder("reader").model("fake-model").build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("read_tool_output", {"handle": "h", "offset": "abc"})),
        Reply.tool_calls(ToolCall("read_tool_output", {"handle": "h", "length": 10**9})),
        Reply.text("gave up"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "read", scope=harness.scope)
        async with asyncio.timeout(20):
            result = await harness.client.result(run, scope=harness.scope)
    assert result.answer == "gave up"
    assert "offset must be" in harness.fake.requests[1]["messages"][-1]["content"]
    assert "length must be" in harness.fake.requests[2]["messages"][-1]["content"]


async def test_a_run_under_another_tenants_workflow_id_does_not_run(harness: Harness) -> None:
    spec = AgentBuilder("sneaky").model("fake-model").build()
    version = harness.client.publish(spec)
    assert isinstance(version, Version)
    async with harness.worker():
        handle = await harness.env.client.start_workflow(
            AGENT_RUN,
            AgentRunInput(run_id="r1", version=version, scope=harness.scope, messages=("hi",)),
            id="psych-globex-r1-x",
            task_queue=harness.settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert "must have workflow id" in str(failed.value.cause)
    assert harness.fake.requests == []


def huge(size: int) -> str:
    """Return a large text.

    Args:
        size: How many characters.
    """
    return "x" * size


async def test_record_pages_stay_under_the_query_size_limit(harness: Harness) -> None:
    harness.registry.register(huge)
    spec = (
        AgentBuilder("big", registry=harness.registry)
        .model("fake-model")
        .tool("huge")
        .limits(large_result_bytes=400_000, max_turns=20, max_steps=100)
        .build()
    )
    harness.fake.enqueue(
        *[Reply.tool_calls(ToolCall("huge", {"size": 300_000 + i})) for i in range(12)],
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        page = await harness.client.records(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert len(page.records) < page.last_seq  # cut by size, not by count
    assert sum(len(r.model_dump_json()) for r in page.records) <= 1_000_000
    finished = [c for c in report.tool_calls if c.status == "ok"]
    assert len(finished) == 12
    assert json.dumps(report.answer) == '"done"'


async def test_failing_to_decide_fails_the_run_with_its_record_settled(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)

    class Raising(PerCallPolicy):
        async def decide(
            self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
        ) -> PolicyDecision:
            raise RuntimeError("policy store down")

    harness.settings.policy = Raising()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"})), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]
    # An exception inside the policy is a deny, and the Run goes on to settle.
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished[0].status == "denied"
    assert isinstance(records[-1], RunSettled)
    assert deleted == []


async def test_a_malformed_input_fails_the_run_instead_of_retrying_forever(
    harness: Harness,
) -> None:
    async with harness.worker():
        handle = await harness.env.client.start_workflow(
            AGENT_RUN,
            {"run_id": "r1", "scope": {"tenant": "acme"}, "messages": []},
            id="psych-acme-malformed",
            task_queue=harness.settings.task_queue,
        )
        async with asyncio.timeout(20):
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
    assert "version" in str(failed.value.cause)
