"""``read_tool_output`` reads only the asking Run's own results: another Run's handle is
refused exactly as a missing one is (issue 26, item 4)."""

from __future__ import annotations

import re

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness
from .test_agent_run import big_report

pytestmark = pytest.mark.e2e

MISSING = "sha256:" + "0" * 64


async def test_another_runs_handle_is_not_found(harness: Harness) -> None:
    harness.registry.register(big_report)
    owner = (
        AgentBuilder("results-owner", registry=harness.registry)
        .model("fake-model")
        .tool("big_report")
        .limits(large_result_bytes=1024)
        .build()
    )
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
