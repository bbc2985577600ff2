"""A child's answer over the parent's ``large_result_bytes`` reaches the parent's model as
any large tool result does: a handle with a preview, read on with ``read_tool_output``
(until 12-06 it was shown whole, whatever its size)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.activities import LocalBlobStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from .conftest import Harness

pytestmark = pytest.mark.e2e

REPORT = "".join(f"line {n:05d} of the report\n" for n in range(400))  # ~10 KB
HANDLE = re.compile(r'handle "(sha256:[0-9a-f]{64})"')


def _who(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _agent(name: str) -> AgentBuilder:
    return AgentBuilder(name).model("fake-model").instructions(f"You are {name}.")


def _lead_reads_back(calls: list[ToolCall], read: list[str]) -> Any:
    """The lead's responder: ``calls``, a turn each, then it reads the stored answer from
    the start (``read`` gets each tool result it was shown after them), then answers."""

    def respond(body: dict[str, Any]) -> Reply:
        if _who(body) != "lead":
            return Reply.text(REPORT)
        tool = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(tool) < len(calls):
            return Reply.tool_calls(calls[len(tool)])
        read.append(tool[-1])
        if len(tool) == len(calls):
            handle = HANDLE.search(tool[-1])
            if handle is None:
                return Reply.text("shown whole")
            arguments = {"handle": handle.group(1), "offset": 0, "length": 65536}
            return Reply.tool_calls(ToolCall("read_tool_output", arguments))
        return Reply.text("done")

    return respond


async def test_a_subagents_large_answer_is_stored_and_read_back(harness: Harness) -> None:
    worker = _agent("worker").build()
    spec = (
        _agent("lead")
        .subagent("worker", "Writes long reports, for tests only.", worker)
        .limits(large_result_bytes=1000)
        .build()
    )
    read: list[str] = []
    delegate = ToolCall("delegate", {"agent": "worker", "task": "report"})
    harness.fake.responder = _lead_reads_back([delegate], read)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records

    assert result.status is RunStatus.COMPLETED
    shown = read[0]
    assert len(shown) < 4000 and "too large to show whole" in shown, shown[:200]
    assert shown.endswith(REPORT[:1000])
    back = read[1]
    assert REPORT in back  # its own handle: read back whole
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished) and r.tool == "delegate"]
    assert finished.status == "ok" and finished.truncated
    assert finished.size == len(REPORT.encode())


async def test_wait_childrens_large_endings_are_stored_and_read_back(harness: Harness) -> None:
    spec = _agent("lead").spawn().limits(large_result_bytes=1000).build()
    read: list[str] = []
    spawn = {"name": "writer", "instructions": "You are writer.", "task": "report"}
    calls = [ToolCall("spawn", spawn), ToolCall("wait_children", {})]
    harness.fake.responder = _lead_reads_back(calls, read)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    shown = read[0]
    assert len(shown) < 4000 and "too large to show whole" in shown, shown[:200]
    back = read[1]
    # Read back whole (after the slice's header line): the endings, the answer in them.
    (ending,) = json.loads(back[back.index("[{") :])
    assert ending["status"] == "completed" and ending["answer"] == REPORT


class _ReportDown(LocalBlobStore):
    """A blob store that cannot take ``REPORT`` whole (the lead's store of the answer)."""

    async def put(self, data: bytes) -> str:
        if data == REPORT.encode():
            raise OSError("the blob volume is gone")
        return await super().put(data)


async def test_a_childs_answer_that_cannot_be_stored_is_read_cut_and_the_run_goes_on(
    harness: Harness, tmp_path: Path
) -> None:
    # From a review: psych.tool.store_result failing through its retries (the blob store
    # down) raised out of the lead's turn and failed it, the child's answer lost to it.
    harness.settings = dataclasses.replace(harness.settings, blobs=_ReportDown(tmp_path / "b"))
    worker = _agent("worker").build()
    spec = (
        _agent("lead")
        .subagent("worker", "Writes long reports, for tests only.", worker)
        .limits(large_result_bytes=1000)
        .build()
    )
    read: list[str] = []
    delegate = ToolCall("delegate", {"agent": "worker", "task": "report"})
    harness.fake.responder = _lead_reads_back([delegate], read)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished) and r.tool == "delegate"]
    assert finished.status == "ok" and not finished.truncated
    assert finished.content.startswith(REPORT[:1000])
    assert "the blob volume is gone" in finished.content
    assert len(finished.content.encode()) < 1300, finished.content[-300:]
    assert read == [finished.content]
