"""A person's answer to ``ask_question`` is a tool result like any other: one over the
Run's ``large_result_bytes`` is stored and the model shown a handle with a preview, which
``read_tool_output`` reads on (SEMANTICS "Limits"). Until 12-07 the answer reached the
model whole, whatever the bound (an answer may be as large as an update takes, 256 KB, eight
times the default bound). Read from the fake model's requests and the Run's records."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from ._waiting import state_when
from .conftest import Harness
from .test_rejections_bounded import _FailingPuts

pytestmark = pytest.mark.e2e

HANDLE = re.compile(r'handle "(sha256:[0-9a-f]{64})"')
LONG_ANSWER = "".join(f"Line {n:03d} of the log the person pasted.\n" for n in range(100))
SHORT_ANSWER = "order 42"


def _asker(limit: int) -> AgentBuilder:
    return (
        AgentBuilder("answer-reader")
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .limits(large_result_bytes=limit)
    )


async def _asked(harness: Harness, limit: int, answer: str) -> tuple[list[str], list[Any]]:
    """Run an agent that asks one question (answered ``answer``) and reads a handle it is
    shown back whole; what the model was shown of each tool result, and the records."""
    shown: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        tool = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not tool:
            return Reply.tool_calls(ToolCall("ask_question", {"question": "The log?"}, id="q1"))
        shown.append(tool[-1])
        handle = HANDLE.search(tool[-1])
        if len(tool) == 1 and handle is not None:
            arguments = {"handle": handle.group(1), "offset": 0, "length": 65536}
            return Reply.tool_calls(ToolCall("read_tool_output", arguments, id="r1"))
        return Reply.text("done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(_asker(limit).build(), "go", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: bool(state.pending),
            what="the question pending",
            within=20,
        )
        await harness.client.answer(run, "q1", answer, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    return shown, list(records)


async def test_an_answer_over_large_result_bytes_is_a_handle_the_model_reads(
    harness: Harness,
) -> None:
    shown, records = await _asked(harness, 1000, LONG_ANSWER)
    assert len(shown) == 2, shown
    assert len(shown[0]) < 2000 and "too large to show whole" in shown[0], shown[0][:200]
    assert shown[0].endswith(LONG_ANSWER[:1000])
    assert LONG_ANSWER in shown[1]  # its own handle: read back whole
    (asked,) = [r for r in records if isinstance(r, ToolCallFinished) and r.tool == "ask_question"]
    assert asked.status == "ok" and asked.truncated
    assert asked.size == len(LONG_ANSWER.encode())


async def test_an_answer_within_large_result_bytes_is_shown_whole(harness: Harness) -> None:
    shown, records = await _asked(harness, 1000, SHORT_ANSWER)
    assert shown == [SHORT_ANSWER]
    (asked,) = [r for r in records if isinstance(r, ToolCallFinished) and r.tool == "ask_question"]
    assert asked.status == "ok" and not asked.truncated


async def test_an_answer_that_cannot_be_stored_is_read_cut_and_the_run_goes_on(
    harness: Harness, tmp_path: Path
) -> None:
    # From a review: psych.tool.store_result failing through its retries (the blob store
    # down) raised out of the turn and failed the whole Run, the call left without its
    # tool_call_finished; before the bound, an answer never touched the blob store.
    blobs = _FailingPuts(tmp_path / "failing-blobs")
    harness.settings = dataclasses.replace(harness.settings, blobs=blobs)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "The log?"}, id="q1")),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(_asker(1000).build(), "go", scope=harness.scope)
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: bool(state.pending),
            what="the question pending",
            within=20,
        )
        blobs.failures = 3  # every attempt of psych.tool.store_result (SAFE_TOOL_RETRY)
        await harness.client.answer(run, "q1", LONG_ANSWER, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (asked,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert asked.status == "ok" and not asked.truncated
    assert asked.content.startswith(LONG_ANSWER[:1000])
    assert "the blob volume is gone" in asked.content
    assert len(asked.content.encode()) < 1300, asked.content[-300:]
    tool = [m["content"] for m in harness.fake.requests[1]["messages"] if m["role"] == "tool"]
    assert tool == [asked.content]
