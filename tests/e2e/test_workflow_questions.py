"""Whether an agent step may ask questions is its agent's to say, not its workflow's.

A workflow hands its agent steps its SuspensionPolicy's expiries (``ParentBounds``), so the
workflow's expiries govern the whole Run; ``may_ask_questions`` is no expiry but part of
what the agent's model is offered (the built-in ``ask_question`` tool), so it must come from
the agent's own Version: an agent that may ask keeps the tool inside a workflow with the
default policy, and its question is answered through the workflow's id; an agent that may
not ask does not gain it from a workflow that sets the flag.
"""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder, AgentSpec, ValidationFailed, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunStatus

from .conftest import Harness
from .test_workflow_run import pending_of

pytestmark = pytest.mark.e2e


def offered(request: dict[str, Any]) -> set[str]:
    """The tool names one model request offered."""
    return {tool["function"]["name"] for tool in request.get("tools") or ()}


def receptionist(*, may_ask: bool) -> AgentSpec:
    builder = AgentBuilder("receptionist").model("fake-model").instructions("Greet the guest.")
    return builder.suspension(may_ask_questions=may_ask).build()


async def test_an_agent_step_that_may_ask_asks_and_is_answered_through_the_workflow(
    harness: Harness,
) -> None:
    spec = (
        WorkflowBuilder("front-desk")  # the default SuspensionPolicy: may_ask_questions off
        .agent_step("greet", receptionist(may_ask=True))
        .build()
    )
    assert spec.suspension.may_ask_questions is False
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Your name?"}, id="q-name")),
        Reply.text("Welcome, Ada."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "A guest arrived", scope=harness.scope)
        state = await pending_of(harness, run)
        (item,) = state.pending
        child = f"{run.workflow_id}-step1"
        assert (item.reason, item.id, item.question, item.run) == (
            "question",
            "q-name",
            "Your name?",
            child,
        )
        await harness.client.answer(run, "q-name", "Ada", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        child_records = (await harness.client.records(child, scope=harness.scope)).records
    assert "ask_question" in offered(harness.fake.requests[0])
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs == {"greet": "Welcome, Ada."}
    resumed = [(r.reason, r.id, r.outcome) for r in child_records if isinstance(r, Resumed)]
    assert resumed == [("question", "q-name", "answered")]
    assert harness.fake.requests[1]["messages"][-1] == {
        "role": "tool",
        "content": "Ada",
        "tool_call_id": "q-name",
    }


async def test_a_workflow_that_says_it_may_ask_is_refused_naming_the_field(
    harness: Harness,
) -> None:
    # A workflow asks no questions; whether an agent step may ask is its own agent's
    # setting. A WorkflowSpec saying so is refused before anything runs, not ignored.
    spec = (
        WorkflowBuilder("front-desk")
        .suspension(may_ask_questions=True)
        .agent_step("greet", receptionist(may_ask=False))
        .build()
    )
    with pytest.raises(ValidationFailed) as refused:
        await harness.client.dispatch(spec, "A guest arrived", scope=harness.scope)
    assert [line.split(":")[0].strip() for line in str(refused.value).splitlines()[1:]] == [
        "suspension.may_ask_questions"
    ]
    assert harness.fake.requests == []
