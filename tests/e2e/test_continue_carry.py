"""Continue-as-new carries the compose features' per-Run state: the task list, compaction's
cut and the spawned children a later turn collects (``workflows/_carry.py``), the actions
sent under an idempotency key (``workflows/kernel/_kept_actions.py``), and a follow-up
taken after an answer as the next turn's input."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from psych_runtime.activities import SUMMARISER_PROMPT
from psych_runtime.specs import AgentBuilder, AgentSpec, PsychError, Refused, RunFailed
from psych_runtime.testing import Reply, ToolCall, Usage
from psych_runtime.workflows import (
    CompactionApplied,
    Resumed,
    RunContinued,
    RunStatus,
    SteerReceived,
    TasksUpdated,
    ToolCallStarted,
)

from ._waiting import all_records, state_when
from .conftest import Harness
from .test_suspensions import orders_agent, suspended

pytestmark = pytest.mark.e2e

LEAD = "You lead the work."
PLAN = [{"title": "Find x", "status": "in_progress"}]


def system(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def last(body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = body["messages"][-1]
    return message


async def test_the_task_list_and_a_settled_spawned_child_cross_the_cut(harness: Harness) -> None:
    child_answered = asyncio.Event()

    @harness.registry.register
    async def nap(seconds: float) -> str:
        """Wait a moment."""
        await child_answered.wait()
        await asyncio.sleep(seconds)
        return "rested"

    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .instructions(LEAD)
        .tool("nap")
        .tasks()
        .spawn(tools=["nap"])
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD not in system(body):  # the spawned child
            child_answered.set()
            return Reply.text("x = 42")
        if message["role"] == "user":
            return Reply.tool_calls(
                ToolCall("update_tasks", {"tasks": PLAN}),
                ToolCall("spawn", {"name": "finder", "instructions": "You find x.", "task": "x?"}),
            )
        if message["content"] == "rested":
            return Reply.tool_calls(ToolCall("wait_children", {}))
        if message["content"].startswith("[{"):
            (ending,) = json.loads(message["content"])
            return Reply.text(f"lead: {ending['answer']}")
        # The spawn's and update_tasks' results: rest until the child has answered.
        return Reply.tool_calls(ToolCall("nap", {"seconds": 0.5}))

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "find x", scope=harness.scope, continue_after_events=1
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        prompts = [system(body) for body in harness.fake.requests if LEAD in system(body)]
        last_execution = await harness.client.temporal.get_workflow_handle(
            run.workflow_id
        ).fetch_history()

    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "lead: x = 42"  # collected after the cut, from the carry
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    continued = [r.seq for r in records if isinstance(r, RunContinued)]
    wait = next(r for r in records if isinstance(r, ToolCallStarted) and r.tool == "wait_children")
    assert continued and continued[0] < wait.seq
    (updated,) = [r for r in records if isinstance(r, TasksUpdated)]
    assert [t.model_dump() for t in updated.tasks] == PLAN
    assert [t.model_dump() for t in state.tasks] == PLAN
    # Every call after the change, in every execution, shows the list.
    assert all("Task list:\n- [in_progress] Find x" in p for p in prompts[1:])
    # The execution after the collection carries the child without its answer.
    started = last_execution.events[0].workflow_execution_started_event_attributes
    (carried,) = json.loads(started.input.payloads[0].data)["carry"]["features"]["spawn"]
    assert carried["state"] == "collected" and carried["answer"] is None


async def test_compaction_goes_on_from_its_cut_after_the_cut(harness: Harness) -> None:
    # Every call's prompt is over the trigger, one turn is kept: each boundary compacts,
    # and each execution compacts past the cut the last one reached, never before it.
    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    spec = (
        AgentBuilder("steps", registry=harness.registry)
        .model("fake-model")
        .tool("step")
        .compaction(100, keep_recent_turns=1)
        .build()
    )
    big = Usage(input_tokens=500, output_tokens=5)
    turns = iter(range(1, 100))

    def respond(body: dict[str, Any]) -> Reply:
        if system(body).startswith(SUMMARISER_PROMPT):
            return Reply.text("Earlier: steps were taken.", usage=Usage(input_tokens=50))
        n = next(turns)
        if n > 5:
            return Reply.text("all steps done", usage=big)
        return Reply.tool_calls(ToolCall("step", {"n": n}), usage=big)

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "take five steps", scope=harness.scope, continue_after_events=1
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)

    assert result.status is RunStatus.COMPLETED, result.reason
    assert any(isinstance(r, RunContinued) for r in records)
    cuts = [r.cut_turn for r in records if isinstance(r, CompactionApplied)]
    assert len(cuts) >= 2
    assert cuts == sorted(set(cuts)), f"the cut moved back or stood still: {cuts}"


async def test_a_keyed_action_sent_again_after_the_cut_is_answered_as_before(
    harness: Harness,
) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c7")),
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "8"}, id="c8")),
        Reply.text("ok"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "delete 7 and 8", scope=harness.scope, continue_after_events=1
        )
        await suspended(harness, run)
        await harness.client.steer(run, "be brief", scope=harness.scope, idempotency_key="s-1")
        first = await harness.client.approve(run, "c7", scope=harness.scope, idempotency_key="a-1")
        # The Run continues as new at the turn's end, then waits for c8.
        await state_when(
            harness.client,
            run,
            harness.scope,
            lambda state: [p.id for p in state.pending] == ["c8"],
            what="the second approval",
        )
        # Sent again to the next execution, which Temporal has not seen them in.
        await harness.client.steer(run, "be brief", scope=harness.scope, idempotency_key="s-1")
        again = await harness.client.approve(run, "c7", scope=harness.scope, idempotency_key="a-1")
        # What A2A asks before it answers a message again: the request was taken.
        taken = await harness.client.taken(run, "a-1", scope=harness.scope)
        # A key still names one request in the next execution.
        with pytest.raises(PsychError, match="key 'a-1' already approved approval 'c7'"):
            await harness.client.approve(run, "c8", scope=harness.scope, idempotency_key="a-1")
        await harness.client.approve(run, "c8", scope=harness.scope, idempotency_key="a-2")
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        # Once the Run settled in a later execution, its last one still answers them.
        settled = await harness.client.approve(
            run, "c7", scope=harness.scope, idempotency_key="a-1"
        )
        await harness.client.steer(run, "be brief", scope=harness.scope, idempotency_key="s-1")
        with pytest.raises(Refused, match="has settled completed"):
            await harness.client.steer(run, "be brief", scope=harness.scope, idempotency_key="s-2")
    assert result.status is RunStatus.COMPLETED, result.reason
    assert again == first == taken == settled
    assert first.outcome == "approved"
    assert deleted == ["7", "8"]
    continued = [r.seq for r in records if isinstance(r, RunContinued)]
    steers = [r for r in records if isinstance(r, SteerReceived)]
    assert continued and len(steers) == 1 and steers[0].seq < continued[0]
    assert [r.id for r in records if isinstance(r, Resumed)] == ["c7", "c8"]


def follow_up_agent(harness: Harness, waited: asyncio.Event) -> AgentSpec:
    """An agent whose first turn waits (``wait_note``) until the test has sent a follow-up,
    so the follow-up is taken after its second turn's answer: the input of its third."""

    @harness.registry.register
    async def wait_note() -> str:
        """Wait for a note."""
        await waited.wait()
        return "waited"

    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    return (
        AgentBuilder("follower", registry=harness.registry)
        .model("fake-model")
        .tool("wait_note")
        .tool("step")
        .compaction(100, keep_recent_turns=1, model="fake-other")
        .build()
    )


@pytest.mark.parametrize("continue_after_events", [1, 10_000])
async def test_a_follow_up_taken_before_the_cut_stays_its_turns_input(
    harness: Harness, continue_after_events: int
) -> None:
    # Turn 2 answers and takes the follow-up, the Run continues as new (1) or not
    # (10,000), turn 3 is over the trigger, so turns 1-2 are summarised before turn 4:
    # the follow-up starts turn 3, which is kept, either way.
    waited = asyncio.Event()
    small, big = Usage(input_tokens=1), Usage(input_tokens=500)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("wait_note", {}), usage=small),
        Reply.text("first answer", usage=small),
        Reply.tool_calls(ToolCall("step", {"n": 1}), usage=big),
        Reply.text("done"),
    )
    harness.fake.enqueue(Reply.text("Said hello; answered."), model="fake-other")
    async with harness.worker():
        run = await harness.client.dispatch(
            follow_up_agent(harness, waited),
            "hello",
            scope=harness.scope,
            continue_after_events=continue_after_events,
        )
        await harness.client.steer(run, "and now step 1", scope=harness.scope, mode="follow_up")
        waited.set()
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    continued = any(isinstance(r, RunContinued) for r in records)
    assert continued is (continue_after_events == 1)
    (applied,) = [r for r in records if isinstance(r, CompactionApplied)]
    # hello, the wait_note call and its result, the first answer: not the follow-up.
    assert (applied.cut_turn, applied.messages_replaced) == (3, 4)
    summariser, turn4 = harness.fake.requests[3:]
    assert "and now step 1" not in json.dumps(summariser["messages"])
    assert [(m["role"], m["content"]) for m in turn4["messages"][1:3]] == [
        ("user", "and now step 1"),
        ("assistant", None),
    ]


@pytest.mark.parametrize("continue_after_events", [1, 10_000])
async def test_a_follow_up_no_call_answered_after_the_cut_is_undelivered(
    harness: Harness, continue_after_events: int
) -> None:
    waited = asyncio.Event()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("wait_note", {})),
        Reply.text("first answer"),
        Reply.error(400, message="refused"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            follow_up_agent(harness, waited),
            "hello",
            scope=harness.scope,
            continue_after_events=continue_after_events,
        )
        await harness.client.steer(run, "and now step 1", scope=harness.scope, mode="follow_up")
        waited.set()
        with pytest.raises(RunFailed, match="1 message sent during the Run not delivered"):
            await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert [(u.mode, u.message) for u in report.undelivered] == [("follow_up", "and now step 1")]
