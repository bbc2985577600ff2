"""The task list and display components end to end on a real dev server (issue 10 item 4).

Asserted through the records, the state query, the report, what ``psych run`` prints and
the requests the fake model received.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from psych_runtime.activities.contract import (
    MODEL_CALL,
    SlimModelCallInput,
)
from psych_runtime.specs import COMPONENT_KINDS, AgentBuilder, Task, parse_component
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import follow_run, format_report
from psych_runtime.workers.console import print_transcript, read_transcript
from psych_runtime.workflows import (
    ComponentShown,
    RunHandle,
    RunStatus,
    TasksUpdated,
    ToolCallFinished,
)

from .conftest import Harness

pytestmark = pytest.mark.e2e

PLAN = [
    {"title": "Look up the order", "status": "in_progress"},
    {"title": "Issue the refund", "status": "pending"},
]


def _system(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def _offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


async def _model_inputs(harness: Harness, run: RunHandle) -> list[SlimModelCallInput]:
    """The model activity's inputs, from the Run's history."""
    handle = harness.env.client.get_workflow_handle(run.workflow_id)
    converter = harness.env.client.data_converter
    inputs: list[SlimModelCallInput] = []
    async for event in handle.fetch_history_events():
        attributes = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes") and (
            attributes.activity_type.name == MODEL_CALL
        ):
            (decoded,) = await converter.decode(attributes.input.payloads, [SlimModelCallInput])
            inputs.append(decoded)
    return inputs


async def test_the_task_list_is_recorded_in_state_and_in_the_next_system_prompt(
    harness: Harness,
) -> None:
    spec = AgentBuilder("planner").instructions("Plan, then act.").model("fake-model")
    # Three refusals in a row would withhold the tool at the default threshold.
    spec = spec.tasks(True).limits(failure_streak_threshold=5, failure_streak_hard_stop=10)
    done = [{"title": "Look up the order", "status": "completed"}, PLAN[1]]
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})),
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": [{"title": "x", "status": "done"}]})),
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": [{"title": "y" * 201}]})),
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": [{"title": "t"}] * 51})),
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": done})),
        Reply.text("Done."),
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(spec.build(), "Refund order 42", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        state = await client.status(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope)
        records = [r async for r in client.stream(run, scope=harness.scope)]
        printed = io.StringIO()
        await follow_run(client, run, scope=harness.scope, out=printed)
        inputs = await _model_inputs(harness, run)

    assert result.status is RunStatus.COMPLETED
    updates = [r for r in records if isinstance(r, TasksUpdated)]
    assert [[t.model_dump() for t in u.tasks] for u in updates] == [PLAN, done]
    assert [u.turn for u in updates] == [1, 5]
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [r.status for r in finished] == ["ok", "error", "error", "error", "ok"]
    assert "tasks.0.status" in finished[1].content and "'completed'" in finished[1].content
    assert "at most 200 characters" in finished[2].content
    assert "at most 50 items" in finished[3].content

    # The state query and the report hold the list as it was last set.
    assert state.tasks == tuple(Task.model_validate(t) for t in done)
    assert report.tasks == state.tasks and report.task_updates == 2
    assert "[x] Look up the order" in format_report(report)
    assert "[ ] Issue the refund" in printed.getvalue()
    assert "tasks (0/2 done):" in printed.getvalue()

    # The task-list block follows a change on the next call only; refused input changes
    # nothing.
    requests = harness.fake.requests
    assert "update_tasks" in _offered(requests[0])
    assert "Task list:" not in _system(requests[0])
    block = "Task list:\n- [in_progress] Look up the order\n- [pending] Issue the refund"
    assert _system(requests[1]).startswith("Plan, then act.")
    assert _system(requests[1]).endswith(block)
    assert all(_system(r).endswith(block) for r in requests[2:5])
    assert _system(requests[5]).endswith(
        "- [completed] Look up the order\n- [pending] Issue the refund"
    )
    # Inline when the list changed (a new system_ref follows), by reference otherwise.
    assert [i.system_prompt is not None for i in inputs] == [True, True, False, False, False, True]
    assert all(i.system_ref is None for i in (inputs[1], inputs[5]))


async def test_the_transcript_shows_the_task_list_the_system_prompt_took(
    harness: Harness,
) -> None:
    # From the call after an update on, the model's system prompt ends with the task list:
    # the transcript, the conversation as the model saw it, says so where it changed.
    spec = AgentBuilder("planner").instructions("Plan, then act.").model("fake-model")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})), Reply.text("Done.")
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(spec.tasks(True).build(), "Refund 42", scope=harness.scope)
        await client.result(run, scope=harness.scope)
        transcript = await read_transcript(client, run, scope=harness.scope)
    assert [(m.role, m.origin, m.turn) for m in transcript.messages] == [
        ("system", "system", 0),
        ("user", "input", 1),
        ("assistant", "model", 1),
        ("tool", "tool", 2),
        ("system", "tasks", 2),
        ("assistant", "model", 2),
    ]
    tasks = transcript.messages[4]
    block = "Task list:\n- [in_progress] Look up the order\n- [pending] Issue the refund"
    assert (tasks.content, tasks.exact) == (block, False)
    assert _system(harness.fake.requests[1]).endswith("\n\n" + block)
    # Not a message of the conversation: the chat form leaves it out.
    assert [m["role"] for m in transcript.chat_messages()] == [
        "system", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    text = io.StringIO()
    print_transcript(transcript, text, markdown=False)
    assert (
        "── system (the task list, from turn 2 on) ──\n(from turn 2 on, the system prompt "
        "ended with this task list, in place of the one before)\n" + block + "\n"
    ) in text.getvalue()


async def test_without_the_flags_no_task_or_component_tool_is_offered(harness: Harness) -> None:
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN})), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            AgentBuilder("plain").model("fake-model").build(), "hi", scope=harness.scope
        )
        await harness.client.result(run, scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]
    assert not {"update_tasks", "show_component"} & _offered(harness.fake.requests[0])
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "error" and "unknown tool 'update_tasks'" in finished.content
    assert state.tasks == ()


COMPONENTS: list[dict[str, Any]] = [
    {
        "kind": "card",
        "title": "Order 42",
        "body": "Delivered on Monday.",
        "link": "https://shop.example/orders/42",
    },
    {
        "kind": "carousel",
        "title": "Similar items",
        "cards": [{"title": "Mug"}, {"title": "Cup", "image": "https://cdn.example/cup.png"}],
    },
    {
        "kind": "detail",
        "title": "Customer",
        "fields": [{"label": "Name", "value": "Ada"}, {"label": "Plan", "value": "gold"}],
    },
    {
        "kind": "timeline",
        "events": [
            {"at": "Mon 09:00", "title": "Ordered"},
            {"at": "Tue 14:00", "title": "Shipped", "body": "by courier"},
        ],
    },
    {
        "kind": "chart",
        "title": "Refunds",
        "chart": "line",
        "labels": ["Jan", "Feb"],
        "series": [{"name": "count", "values": [3, 5]}],
    },
    {"kind": "metric", "label": "Refund rate", "value": "2.5", "unit": "%", "delta": "-0.3"},
]


async def test_each_component_kind_is_shown_recorded_and_reported(harness: Harness) -> None:
    spec = (
        AgentBuilder("shower")
        .model("fake-model")
        .components(True)
        .limits(failure_streak_threshold=5, failure_streak_hard_stop=10)
        .build()
    )
    bad_link = {"kind": "card", "title": "x", "link": "javascript:alert(1)"}
    too_long = {"kind": "metric", "label": "L" * 201, "value": "1"}
    harness.fake.enqueue(
        Reply.tool_calls(*(ToolCall("show_component", {"component": c}) for c in COMPONENTS)),
        Reply.tool_calls(
            ToolCall("show_component", {"component": bad_link}),
            ToolCall("show_component", {"component": too_long}),
            ToolCall("show_component", {"component": {"kind": "video", "title": "x"}}),
        ),
        Reply.text("Shown."),
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(spec, "Show me", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope)
        records = [r async for r in client.stream(run, scope=harness.scope)]
        printed = io.StringIO()
        await follow_run(client, run, scope=harness.scope, out=printed)

    assert result.status is RunStatus.COMPLETED
    assert "show_component" in _offered(harness.fake.requests[0])
    shown = [r for r in records if isinstance(r, ComponentShown)]
    assert [s.component for s in shown] == [parse_component({"component": c}) for c in COMPONENTS]
    assert [s.component.kind for s in shown] == list(COMPONENT_KINDS)
    assert [c.component for c in report.components] == [s.component for s in shown]
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [r.status for r in finished] == ["ok"] * 6 + ["error"] * 3
    assert "links must be http(s)" in finished[6].content
    assert "component.metric.label" in finished[7].content
    assert "at most 200 characters" in finished[7].content
    assert "'video'" in finished[8].content
    # The model read the refusals.
    tool_messages = [m for m in harness.fake.requests[2]["messages"] if m["role"] == "tool"]
    assert "links must be http(s)" in tool_messages[-3]["content"]

    text = format_report(report)
    assert "components:   6" in text
    for line in (
        "card: Order 42",
        "carousel: Similar items (2 cards)",
        "detail: Customer",
        "Plan: gold",
        "Tue 14:00  Shipped - by courier",
        "chart (line): Refunds",
        "count: Jan 3, Feb 5",
        "metric: Refund rate = 2.5 % (-0.3)",
    ):
        assert line in text
        assert line in printed.getvalue()
    assert "javascript:" not in text
