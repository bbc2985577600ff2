"""The deadline clock runs while the parent calls its model, even when a spawned child
waits for an answer meanwhile (a child's pending item alone would make the parent look
as if it only waited)."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

LEAD = "You lead the work."


def system(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


async def test_a_spawned_childs_question_does_not_stop_the_parents_clock(
    harness: Harness,
) -> None:
    @harness.registry.register
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .instructions(LEAD)
        .tool("note")
        .spawn(tools=["note"])
        .suspension(may_ask_questions=True)
        .limits(deadline_seconds=2)
        .build()
    )
    parent_calls = 0

    def respond(body: dict[str, Any]) -> Reply:
        nonlocal parent_calls
        if LEAD not in system(body):  # the child: asks, and waits for an answer
            return Reply.tool_calls(ToolCall("ask_question", {"question": "which x?"}))
        parent_calls += 1
        if parent_calls == 1:
            return Reply.tool_calls(
                ToolCall("spawn", {"name": "asker", "instructions": "You ask.", "task": "x?"})
            )
        if parent_calls == 2:
            # 4 s of the parent's own work, past its 2 s deadline, while the child waits.
            return Reply.stall(4.0, then=Reply.tool_calls(ToolCall("note", {"text": "x"})))
        return Reply.text("done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find x", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    assert result.reason == "deadline: 2 s passed"
    assert parent_calls == 2  # no model call started after the deadline
