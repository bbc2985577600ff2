"""``read_tool_output`` reads only the asking Run's own results: another Run's handle is
refused exactly as a missing one is (issue 26, item 4)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder, AgentSpec, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, StepStarted, ToolCallReport

from .conftest import Harness
from .test_agent_run import big_report

pytestmark = pytest.mark.e2e

MISSING = "sha256:" + "0" * 64
REF = re.compile(r"sha256:[0-9a-f]{64}")


def reporting_agent(harness: Harness, name: str) -> AgentSpec:
    """An agent with ``big_report``, whose results over 1 KB are stored and shown as a
    handle."""
    if "big_report" not in harness.registry:
        harness.registry.register(big_report)
    return (
        AgentBuilder(name, registry=harness.registry)
        .model("fake-model")
        .tool("big_report")
        .limits(large_result_bytes=1024)
        .build()
    )


async def test_another_runs_handle_is_not_found(harness: Harness) -> None:
    owner = reporting_agent(harness, "results-owner")
    reader = AgentBuilder("results-reader").model("fake-model").build()
    async with harness.worker():
        # Run A: its report is stored whole and reaches its model as a handle.
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("big_report", {"size": 10_000})),
            Reply.text("stored"),
        )
        first = await harness.client.dispatch(owner, "report", scope=harness.scope)
        assert (await harness.client.result(first, scope=harness.scope)).status is (
            RunStatus.COMPLETED
        )
        (stored,) = (await harness.client.report(first, scope=harness.scope)).tool_calls
        assert stored.truncated and stored.result_ref is not None
        handle = stored.result_ref
        shown = harness.fake.requests[1]["messages"][-1]["content"]
        assert re.search(handle, shown)

        # Run A reads its own handle.
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("big_report", {"size": 10_000})),
            Reply.tool_calls(ToolCall("read_tool_output", {"handle": handle, "length": 5})),
            Reply.text("read"),
        )
        again = await harness.client.dispatch(owner, "report", scope=harness.scope)
        await harness.client.result(again, scope=harness.scope)
        own = (await harness.client.report(again, scope=harness.scope)).tool_calls[1]
        assert (own.status, (own.result or "").splitlines()[1]) == ("ok", "abcde")

        # Run B, same tenant, asks for A's handle and for one that does not exist.
        harness.fake.enqueue(
            Reply.tool_calls(
                ToolCall("read_tool_output", {"handle": handle}),
                ToolCall("read_tool_output", {"handle": MISSING}),
            ),
            Reply.text("nothing"),
        )
        second = await harness.client.dispatch(reader, "read it", scope=harness.scope)
        assert (await harness.client.result(second, scope=harness.scope)).status is (
            RunStatus.COMPLETED
        )
        foreign, missing = (await harness.client.report(second, scope=harness.scope)).tool_calls
    assert (foreign.status, foreign.result) == (
        "error",
        f"no stored tool output with handle {handle!r}",
    )
    assert (missing.status, missing.result) == (
        "error",
        f"no stored tool output with handle {MISSING!r}",
    )
    # What B's model read for the two is the same text, handle aside.
    tool_messages = [m for m in harness.fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"].replace(handle, MISSING) for m in tool_messages] == [
        f"no stored tool output with handle {MISSING!r}"
    ] * 2


async def stored_elsewhere(harness: Harness) -> str:
    """A handle of a result another Run stored (what a caller could name by its hash)."""
    owner = reporting_agent(harness, "results-owner")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("big_report", {"size": 10_000})), Reply.text("stored")
    )
    run = await harness.client.dispatch(owner, "report", scope=harness.scope)
    await harness.client.result(run, scope=harness.scope)
    (stored,) = (await harness.client.report(run, scope=harness.scope)).tool_calls
    assert stored.result_ref is not None
    return stored.result_ref


def read_every_ref(body: dict[str, Any]) -> Reply:
    """The child's model: first read 5 characters of each ref its messages name, then end."""
    messages = body["messages"]
    if any(m["role"] == "tool" for m in messages):
        return Reply.text("done")
    named = [r for m in messages for r in REF.findall(str(m.get("content") or ""))]
    return Reply.tool_calls(
        *(
            ToolCall("read_tool_output", {"handle": h, "length": 5}, id=f"r{i}")
            for i, h in enumerate(dict.fromkeys(named))
        )
    )


def read_back(calls: Sequence[ToolCallReport]) -> dict[str, str | None]:
    """Each read's handle -> what it read (the line after the header), None if refused."""
    return {
        json.loads(c.arguments)["handle"]: (c.result or "").splitlines()[1]
        if c.status == "ok"
        else None
        for c in calls
    }


async def test_a_workflow_hands_its_steps_results_not_a_ref_its_caller_wrote(
    harness: Harness,
) -> None:
    harness.registry.register(big_report)
    spec = (
        WorkflowBuilder("report-then-read", registry=harness.registry)
        .tool("big_report")
        .tool_step("report", "big_report", {"size": 12_000})
        .agent_step("read", AgentBuilder("step-reader").model("fake-model").build())
        .limits(large_result_bytes=1024)
        .build()
    )
    async with harness.worker():
        foreign = await stored_elsewhere(harness)
        harness.fake.responder = read_every_ref
        # The caller writes another Run's ref into the input: the agent step sees it, and
        # the stored output of the workflow's own tool step.
        run = await harness.client.dispatch(spec, f"summarize {foreign}", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        (step,) = [r.run for r in records if isinstance(r, StepStarted) and r.run]
        calls = (await harness.client.report(step, scope=harness.scope)).tool_calls
    assert result.status is RunStatus.COMPLETED, result.reason
    read = read_back(calls)
    assert read.pop(foreign) is None
    assert list(read.values()) == ["abcde"]  # the workflow's own


async def test_a_subagent_is_handed_its_parents_results_not_a_ref_its_model_wrote(
    harness: Harness,
) -> None:
    harness.registry.register(big_report)
    helper = AgentBuilder("helper").model("fake-model").build()
    lead = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("big_report")
        .subagent("helper", "Reads what it is given.", helper)
        .limits(large_result_bytes=1024)
        .build()
    )
    async with harness.worker():
        foreign = await stored_elsewhere(harness)
        mine: list[str] = []

        def lead_or_helper(body: dict[str, Any]) -> Reply:
            tools = [t["function"]["name"] for t in body.get("tools", [])]
            if "delegate" not in tools:
                return read_every_ref(body)
            messages = body["messages"]
            if messages[-1]["role"] == "user":
                return Reply.tool_calls(ToolCall("big_report", {"size": 12_000}, id="b1"))
            if not mine:  # the lead was shown its report's handle: hand it on, and another
                mine.extend(REF.findall(messages[-1]["content"]))
                task = f"read {mine[0]} and {foreign}"
                return Reply.tool_calls(
                    ToolCall("delegate", {"agent": "helper", "task": task}, id="d1")
                )
            return Reply.text("done")

        harness.fake.responder = lead_or_helper
        run = await harness.client.dispatch(lead, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        (child,) = (await harness.client.report(run, scope=harness.scope)).children
        calls = (await harness.client.report(child.run, scope=harness.scope)).tool_calls
    assert result.status is RunStatus.COMPLETED, result.reason
    assert read_back(calls) == {mine[0]: "abcde", foreign: None}


async def test_a_workflow_hands_on_what_its_child_steps_hand_back(harness: Harness) -> None:
    # An agent step that was shown a stored result and names it in its answer, and a
    # nested workflow whose tool step stored its output: the next agent step reads both.
    reporter = reporting_agent(harness, "reporter")
    nested = (
        WorkflowBuilder("nested-report", registry=harness.registry)
        .tool("big_report")
        .tool_step("report", "big_report", {"size": 14_000})
        .limits(large_result_bytes=1024)
        .build()
    )
    spec = (
        WorkflowBuilder("report-twice-then-read", registry=harness.registry)
        .agent_step("report", reporter)
        .workflow_step("nested", nested)
        .agent_step("read", AgentBuilder("step-reader").model("fake-model").build())
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        messages = body["messages"]
        if "big_report" not in tools:
            return read_every_ref(body)
        if messages[-1]["role"] == "user":
            return Reply.tool_calls(ToolCall("big_report", {"size": 12_000}, id="b1"))
        shown = REF.findall(messages[-1]["content"])[0]
        return Reply.text(f"The full report is at {shown}.")

    async with harness.worker():
        harness.fake.responder = respond
        run = await harness.client.dispatch(spec, "report", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        *_, reader = [r.run for r in records if isinstance(r, StepStarted) and r.run]
        calls = (await harness.client.report(reader, scope=harness.scope)).tool_calls
    assert result.status is RunStatus.COMPLETED, result.reason
    assert list(read_back(calls).values()) == ["abcde", "abcde"]
