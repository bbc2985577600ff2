"""A child whose answer was cut at its model's output limit: the lead's model is told so in
the result it reads for that child (a ``delegate`` result, a ``wait_children`` ending),
where it read the cut text as a whole answer before (patch psych-child-cut-answer-told)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

CUT = "Order 42 was shipped on Monday and"
WHOLE = "Order 7 is delivered."


def _who(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _agent(name: str) -> AgentBuilder:
    return AgentBuilder(name).model("fake-model").instructions(f"You are {name}.")


def _lead(calls: list[ToolCall], shown: list[str]) -> Any:
    """The fake model: the lead makes ``calls``, a turn each, then answers (``shown`` gets
    the tool results of its last request); the child ``cutter`` answers cut at its output
    limit, any other child answers whole."""

    def respond(body: dict[str, Any]) -> Reply:
        who = _who(body)
        if who == "cutter":
            return Reply.text(CUT, cut_off=True)
        if who != "lead":
            return Reply.text(WHOLE)
        tool = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if len(tool) < len(calls):
            return Reply.tool_calls(calls[len(tool)])
        shown.extend(tool)
        return Reply.text("done")

    return respond


async def test_a_subagents_cut_answer_is_told_to_the_lead(harness: Harness) -> None:
    spec = (
        _agent("lead")
        .subagent("cutter", "Answers cut short, for tests only.", _agent("cutter").build())
        .subagent("finder", "Answers whole, for tests only.", _agent("finder").build())
        .build()
    )
    shown: list[str] = []
    calls = [
        ToolCall("delegate", {"agent": "cutter", "task": "status of 42?"}),
        ToolCall("delegate", {"agent": "finder", "task": "status of 7?"}),
    ]
    harness.fake.responder = _lead(calls, shown)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    cut, whole = shown
    # The cut answer comes whole, after a note that says it is cut (so the model can tell a
    # text that stops mid-sentence from a short answer); a whole answer comes as it was.
    assert cut.startswith("[runtime] The subagent's answer was cut short"), cut
    assert "output token limit" in cut
    assert cut.endswith("\n\n" + CUT)
    assert whole == WHOLE


async def test_a_cut_answer_stored_as_a_handle_shows_the_note_first(harness: Harness) -> None:
    # An answer over large_result_bytes is shown as a handle and a preview: the note leads
    # the preview, so the model reads it without reading the answer back.
    long_cut = "word " * 400

    def respond(body: dict[str, Any]) -> Reply:
        if _who(body) == "cutter":
            return Reply.text(long_cut, cut_off=True)
        tool = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if not tool:
            return Reply.tool_calls(ToolCall("delegate", {"agent": "cutter", "task": "write"}))
        shown.extend(tool)
        return Reply.text("done")

    spec = (
        _agent("lead")
        .subagent("cutter", "Answers cut short, for tests only.", _agent("cutter").build())
        .limits(large_result_bytes=1000)
        .build()
    )
    shown: list[str] = []
    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    (preview,) = shown
    assert "too large to show whole" in preview, preview[:300]
    assert "[runtime] The subagent's answer was cut short" in preview


async def test_a_spawned_childs_cut_answer_is_told_in_its_ending(harness: Harness) -> None:
    spec = _agent("lead").spawn().build()
    shown: list[str] = []
    calls = [
        ToolCall("spawn", {"name": "cutter", "instructions": "You are cutter.", "task": "42?"}),
        ToolCall("spawn", {"name": "finder", "instructions": "You are finder.", "task": "7?"}),
        ToolCall("wait_children", {}),
    ]
    harness.fake.responder = _lead(calls, shown)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    cut, whole = json.loads(shown[-1])
    assert (cut["agent"], cut["answer"]) == ("cutter", CUT)
    assert "output token limit" in cut["cut_short"]
    # A whole answer's ending is as it was: no such field.
    assert whole == {"status": "completed", "run": whole["run"], "agent": "finder", "answer": WHOLE}


async def test_a_spawned_childs_cut_answer_stored_as_a_handle_shows_cut_short(
    harness: Harness,
) -> None:
    # A cut answer is long by nature: the ending's JSON goes over large_result_bytes and
    # the model reads a handle and a preview of its start. ``cut_short`` comes ahead of the
    # answer, as the delegate note does, so the preview shows it.
    long_cut = "word " * 400

    def respond(body: dict[str, Any]) -> Reply:
        if _who(body) == "cutter":
            return Reply.text(long_cut, cut_off=True)
        tool = [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        calls = [
            ToolCall("spawn", {"name": "cutter", "instructions": "You are cutter.", "task": "?"}),
            ToolCall("wait_children", {}),
        ]
        if len(tool) < len(calls):
            return Reply.tool_calls(calls[len(tool)])
        shown.extend(tool)
        return Reply.text("done")

    spec = _agent("lead").spawn().limits(large_result_bytes=1000).build()
    shown: list[str] = []
    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    preview = shown[-1]
    assert "too large to show whole" in preview, preview[:300]
    assert '"cut_short": "cut short: the model stopped' in preview, preview
