"""An approver's rejection note is the rejected call's result: one over the Run's
``large_result_bytes`` is stored and the model shown a handle with a preview, which
``read_tool_output`` reads on (SEMANTICS "Limits"); the call is still ``rejected``, and the
repeat guard still does not count it. Until 12-07 the note reached the model whole, whatever
the bound (a note may be as large as an update takes, 256 KB). The same for a ToolStep of a
WorkflowRun, and for a child's call rejected through its parent. Read from the fake model's
requests and the Runs' records."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.activities import LocalBlobStore
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec, RunFailed, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, StepFinished, ToolCallFinished

from ._waiting import state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

HANDLE = re.compile(r'handle "(sha256:[0-9a-f]{64})"')
LONG_NOTE = "".join(f"Reason {n:03d}: this order is under a legal hold.\n" for n in range(80))
PREFIX = "An approver rejected this call. Their note: "


def _orders(harness: Harness, deleted: list[str], **limits: int) -> AgentSpec:
    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    return (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .limits(large_result_bytes=1000, **limits)
        .build()
    )


def _reader(shown: list[str], then: ToolCall | None = None) -> Any:
    """A model that deletes order 7, reads back the handle it is shown, then makes ``then``
    (if any) and answers; ``shown``: what it was shown of each tool result."""

    def respond(body: dict[str, Any]) -> Reply:
        tool = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not tool:
            return Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c1"))
        shown.append(tool[-1])
        handle = HANDLE.search(tool[0])
        if len(tool) == 1 and handle is not None:
            arguments = {"handle": handle.group(1), "offset": 0, "length": 65536}
            return Reply.tool_calls(ToolCall("read_tool_output", arguments, id="r1"))
        if len(tool) == 2 and then is not None:
            return Reply.tool_calls(then)
        return Reply.text("done")

    return respond


def _is_bounded(shown: str) -> None:
    assert len(shown) < 2000 and "too large to show whole" in shown, shown[:200]
    assert shown.endswith((PREFIX + LONG_NOTE)[:1000])


async def test_a_rejection_note_over_large_result_bytes_is_a_handle_the_model_reads(
    harness: Harness,
) -> None:
    deleted: list[str] = []
    # Threshold 1: had the rejection counted as the tool's result, the same call again
    # would be refused as a repeat instead of asking for approval again.
    spec = _orders(harness, deleted, repeat_call_threshold=1)
    shown: list[str] = []
    again = ToolCall("delete_order", {"order_id": "7"}, id="c2")
    harness.fake.responder = _reader(shown, then=again)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 7", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: [p.id for p in state.pending] == ["c1"],
            what="c1 waiting for approval",
            within=20,
        )
        await harness.client.deny(run, "c1", scope=harness.scope, note=LONG_NOTE)
        state = await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: state.status.terminal or [p.id for p in state.pending] == ["c2"],
            what="the same call again waiting for approval, or the Run's end",
            within=20,
        )
        if not state.status.terminal:  # else the asserts below say what went wrong
            await harness.client.approve(run, "c2", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    _is_bounded(shown[0])
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == ["7"]
    assert len(shown) == 3, shown
    assert PREFIX + LONG_NOTE in shown[1]  # its own handle: read back whole
    assert shown[2] == "order 7 deleted"
    finished = {r.call_id: r for r in records if isinstance(r, ToolCallFinished)}
    assert finished["c1"].status == "rejected" and finished["c1"].truncated
    assert finished["c1"].size == len((PREFIX + LONG_NOTE).encode())
    assert finished["c2"].status == "ok"


async def test_a_tool_steps_rejection_note_is_bounded_in_its_error(harness: Harness) -> None:
    deleted: list[str] = []
    _orders(harness, deleted)  # registers the tool and the policy
    spec = (
        WorkflowBuilder("purge", registry=harness.registry)
        .tool("delete_order")
        .tool_step("purge", "delete_order", {"order_id": "7"})
        .limits(large_result_bytes=1000)
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "purge", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: [p.id for p in state.pending] == ["purge"],
            what="the step waiting for approval",
            within=20,
        )
        await harness.client.deny(run, "purge", scope=harness.scope, note=LONG_NOTE)
        with pytest.raises(RunFailed) as failed:
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert LONG_NOTE not in str(failed.value)
    assert deleted == []
    (call,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert call.status == "rejected" and call.truncated and call.result_ref
    (step,) = [r for r in records if isinstance(r, StepFinished)]
    assert step.error is not None and step.error.startswith(f"rejected: {PREFIX}")
    assert len(step.error) < 1100, step.error[-200:]


async def test_a_childs_call_rejected_through_its_parent_is_bounded(harness: Harness) -> None:
    deleted: list[str] = []
    agent = _orders(harness, deleted)
    spec = WorkflowBuilder("purge", registry=harness.registry).agent_step("clerk", agent).build()
    shown: list[str] = []
    harness.fake.responder = _reader(shown)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "purge 7", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: [p.id for p in state.pending] == ["c1"],
            what="the child's call waiting for approval",
            within=20,
        )
        await harness.client.deny(run, "c1", scope=harness.scope, note=LONG_NOTE)
        result = await harness.client.result(run, scope=harness.scope)
    _is_bounded(shown[0])
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == []
    assert len(shown) == 2, shown
    assert PREFIX + LONG_NOTE in shown[1]


class _FailingPuts(LocalBlobStore):
    """A blob store whose next ``failures`` puts fail, once set."""

    failures = 0

    async def put(self, data: bytes) -> str:
        if self.failures:
            self.failures -= 1
            raise OSError("the blob volume is gone")
        return await super().put(data)


async def test_a_rejection_that_cannot_be_stored_is_read_cut_and_the_run_goes_on(
    harness: Harness, tmp_path: Path
) -> None:
    # From a review: psych.tool.store_result failing through its retries (the blob store
    # down) raised out of the turn and failed the whole Run, the rejected call left without
    # its tool_call_finished; before the bound, a rejection never touched the blob store.
    blobs = _FailingPuts(tmp_path / "failing-blobs")
    harness.settings = dataclasses.replace(harness.settings, blobs=blobs)
    deleted: list[str] = []
    spec = _orders(harness, deleted)
    shown: list[str] = []
    harness.fake.responder = _reader(shown)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 7", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: [p.id for p in state.pending] == ["c1"],
            what="c1 waiting for approval",
            within=20,
        )
        blobs.failures = 3  # every attempt of psych.tool.store_result (SAFE_TOOL_RETRY)
        await harness.client.deny(run, "c1", scope=harness.scope, note=LONG_NOTE)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == []
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "rejected" and not finished.truncated
    assert finished.content.startswith((PREFIX + LONG_NOTE)[:1000])
    assert "the blob volume is gone" in finished.content
    assert len(finished.content.encode()) < 1300, finished.content[-300:]
    assert shown == [finished.content]
