"""Spawn on the dev server: children the model composes, published, pinned and collected.

The fake model tells a parent from its children by the system prompt (the child's is the
instructions the parent wrote for it), so one responder scripts the whole tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import ModelPrice, TablePricing
from psych_runtime.activities.contract import VERSION_PUBLISH
from psych_runtime.specs import AgentBuilder, AgentSpec, PsychError, Scope, ValidationFailed
from psych_runtime.testing import FakeModel, Reply, ToolCall, Usage
from psych_runtime.workers.console import describe_pending, format_record
from psych_runtime.workflows import (
    ChildSettled,
    ChildSpawned,
    NextRunStarted,
    Record,
    RunAdmitted,
    RunHandle,
    RunState,
    RunStatus,
    SteerReceived,
    ToolCallFinished,
    workflow_id_for,
)

from ._crash import doomed_worker
from ._waiting import eventually, state_when
from ._worker_proc import REGISTRY
from .conftest import Harness
from .test_subagents import _unpublished as unpublished

pytestmark = pytest.mark.e2e

USAGE = Usage(input_tokens=100, output_tokens=10)
PRICE = ModelPrice(input=1.0, output=2.0)
CALL_COST = 100 / 1e6 * 1.0 + 10 / 1e6 * 2.0
LEAD = "You lead the work."


def system(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools", [])}


def last(body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = body["messages"][-1]
    return message


def priced(harness: Harness) -> None:
    """Price the fake model, and publish spawned children where the client reads Versions."""
    harness.settings = dataclasses.replace(
        harness.settings,
        pricing=TablePricing({"fake-model": PRICE, "fake-other": PRICE}),
        versions=harness.client.store,
    )


R = TypeVar("R")


def of(records: tuple[Record, ...], kind: type[R]) -> list[R]:
    return [r for r in records if isinstance(r, kind)]


async def records(harness: Harness, run: RunHandle | str) -> tuple[Record, ...]:
    return (await harness.client.records(run, scope=harness.scope, limit=5000)).records


async def publishes(env: WorkflowEnvironment, workflow_id: str) -> int:
    """How many ``psych.version.publish`` activities the Run's history scheduled."""
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    return sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == VERSION_PUBLISH
    )


def gated_lookup(harness: Harness) -> asyncio.Event:
    """Register ``lookup``, which answers once the returned event is set."""
    gate = asyncio.Event()

    @harness.registry.register
    async def lookup(term: str) -> str:
        """Look a term up."""
        await gate.wait()
        return f"{term} = 42"

    return gate


def lead_agent(harness: Harness) -> AgentBuilder:
    """The lead agent every test starts from, its model calls priced."""
    priced(harness)
    return AgentBuilder("lead", registry=harness.registry).model("fake-model").instructions(LEAD)


def spawn_call(name: str = "finder", *, id: str | None = None, **extra: Any) -> ToolCall:
    arguments = {"name": name, "instructions": f"You are {name}.", "task": "what is x?"}
    if id is None:
        return ToolCall("spawn", {**arguments, **extra})
    return ToolCall("spawn", {**arguments, **extra}, id=id)


async def test_spawn_and_wait_returns_the_answer_and_rolls_up_usage_and_cost(
    harness: Harness,
) -> None:
    gate = gated_lookup(harness)
    spec = lead_agent(harness).tool("lookup").spawn(tools=["lookup"]).build()

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD in system(body):
            if message["role"] == "user":
                return Reply.tool_calls(spawn_call(tools=["lookup"]), usage=USAGE)
            if message["content"].startswith('{"child"'):
                return Reply.tool_calls(ToolCall("wait_children", {}), usage=USAGE)
            (ending,) = json.loads(message["content"])
            return Reply.text(f"lead: {ending['answer']}", usage=USAGE)
        if message["role"] == "user":  # the child
            return Reply.tool_calls(ToolCall("lookup", {"term": "x"}), usage=USAGE)
        return Reply.text(message["content"], usage=USAGE)

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find x", scope=harness.scope)
        state = await state_when(
            harness.client,
            run,
            harness.scope,
            lambda s: any(p.tool == "wait_children" for p in s.pending),
            what="the lead to wait for its child",
            unsettled=True,
        )
        assert state.status is RunStatus.SUSPENDED
        (item,) = [p for p in state.pending if p.tool == "wait_children"]
        assert item.reason == "children"
        # What it waits for, as psych status shows it: the spawned child by its id.
        child_id = f"{run.workflow_id}-spawn1"
        assert (item.question, describe_pending(item)) == (child_id, f"spawned children {child_id}")
        gate.set()
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)
        (spawned,) = of(lead, ChildSpawned)
        child_records = await records(harness, spawned.run)
        report = await harness.client.report(run, scope=harness.scope)
        child_report = await harness.client.report(spawned.run, scope=harness.scope)
        assert await publishes(harness.env, run.workflow_id) == 1

    assert result.answer == "lead: x = 42"
    assert (spawned.agent, spawned.tools, spawned.model) == ("finder", ("lookup",), "fake-model")
    assert format_record(spawned) == (
        f"  spawned finder as {spawned.run} (fake-model; lookup), Version {spawned.version_hash}"
    )
    # The child runs the Version the activity published, pinned by the recorded hash.
    version = harness.client.store.get(spawned.version_hash)
    assert isinstance(version.spec, AgentSpec)
    assert version.spec.instructions == "You are finder."
    assert version.spec.tools == spec.tools  # the parent's definitions, not look-alikes
    (admitted,) = of(child_records, RunAdmitted)
    assert admitted.version_hash == spawned.version_hash == child_report.version_hash
    assert child_report.input == ("what is x?",)
    assert child_report.answer == "x = 42"
    (settled,) = of(lead, ChildSettled)
    assert (settled.via, settled.status, settled.run) == ("spawn", RunStatus.COMPLETED, spawned.run)
    assert settled.totals == child_report.totals
    # Three calls of the lead's own and two of the child's, all in the lead's totals.
    assert result.totals.model_calls == 5
    assert result.totals.usage.input_tokens == 500
    assert result.totals.cost == pytest.approx(5 * CALL_COST)
    assert report.totals == result.totals
    child_call = next(b for b in harness.fake.requests if "You are finder." in system(b))
    assert offered(child_call) >= {"lookup", "spawn", "wait_children", "message_child"}


async def test_each_bound_is_a_refusal_the_model_reads_and_nothing_starts(
    harness: Harness,
) -> None:
    @harness.registry.register
    def lookup(term: str) -> str:
        """Look a term up."""
        return f"{term} = 42"

    @harness.registry.register
    def wipe() -> str:
        """Wipe everything (the lead has it; a child may not)."""
        return "wiped"

    spec = (
        lead_agent(harness)
        .tool("lookup")
        .tool("wipe")
        .spawn(tools=["lookup"], models=["fake-model"], max_alive=1)
        .limits(failure_streak_threshold=10, failure_streak_hard_stop=20)
        .build()
    )
    # A turn's calls start in call order, each running until its first wait: the three
    # refused outright, then one that starts (and is alive), then one over max_alive.
    calls = [
        spawn_call("tool_out", tools=["wipe"], id="tool"),
        spawn_call("model_out", model="fake-other", id="model"),
        spawn_call("two words", id="invalid"),
        spawn_call(id="ok"),
        spawn_call("second", id="alive"),
    ]

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD in system(body):
            if message["role"] == "user":
                return Reply.tool_calls(*calls)
            if message["role"] == "tool" and not message["content"].startswith("[{"):
                return Reply.tool_calls(ToolCall("wait_children", {"mode": "any"}))
            return Reply.text("done")
        return Reply.text("x = 42")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find x", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)
        assert await publishes(harness.env, run.workflow_id) == 1

    assert result.status is RunStatus.COMPLETED
    finished = {r.call_id: r for r in of(lead, ToolCallFinished) if r.tool == "spawn"}
    assert finished["ok"].status == "ok"
    refusals = {
        "tool": "'wipe' is outside the spawn envelope (a child may hold: lookup)",
        "model": "model 'fake-other' is outside the spawn envelope (a child may use: fake-model)",
        "invalid": "the composed child Spec is invalid: name: String should match pattern",
        "alive": "1 spawned children are alive and spawn.max_alive is 1",
    }
    for call_id, text in refusals.items():
        assert finished[call_id].status == "error", call_id
        assert text in finished[call_id].content, finished[call_id].content
    (spawned,) = of(lead, ChildSpawned)
    assert spawned.call_id == "ok"
    (settled,) = of(lead, ChildSettled)
    assert settled.status is RunStatus.COMPLETED


async def test_spawned_children_nest_only_to_max_depth_and_the_depth_chain(
    harness: Harness,
) -> None:
    spec = lead_agent(harness).spawn(max_depth=1).build()
    # A subagent at delegation depth 1 whose own cap is 1: its child would be depth 2. The
    # validator refuses that envelope (until 12-07 it did not, and every spawn of the
    # published tree was refused at run time); a Version that skipped publishing is refused
    # at run time with the same words.
    worker = (
        AgentBuilder("worker", registry=harness.registry)
        .model("fake-model")
        .instructions("You are worker.")
        .spawn(max_depth=1)
        .limits(max_delegation_depth=1)
        .build()
    )
    delegating = (
        AgentBuilder("boss", registry=harness.registry)
        .model("fake-model")
        .instructions(LEAD)
        .subagent("worker", "Does the work it is given, spawning help.", worker)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        message, prompt = last(body), system(body)
        if message["role"] == "user":
            if "delegate" in offered(body):
                return Reply.tool_calls(ToolCall("delegate", {"agent": "worker", "task": "go"}))
            return Reply.tool_calls(spawn_call("helper" if LEAD in prompt else "grandchild"))
        if LEAD in prompt and message["content"].startswith('{"child"'):
            return Reply.tool_calls(ToolCall("wait_children", {}))
        return Reply.text(f"{prompt[:12]} read: {message['content']}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        (spawned,) = of(await records(harness, run), ChildSpawned)
        child = await records(harness, spawned.run)
        with pytest.raises(ValidationFailed) as failed:
            await harness.client.dispatch(delegating, "go", scope=harness.scope)
        other = await unpublished(harness, delegating, f"deep-{uuid.uuid4().hex[:8]}", "go")
        delegated = await harness.client.result(other, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    (refused,) = [r for r in of(child, ToolCallFinished) if r.tool == "spawn"]
    assert refused.status == "error"
    assert "spawn depth 2, beyond spawn.max_depth (1)" in refused.content
    assert of(child, ChildSpawned) == []
    (problem,) = failed.value.problems
    assert problem.path == "subagents[worker].spec.spawn.max_depth"
    refusal = "delegation depth 2 exceeds max_delegation_depth 1 of agent 'worker'"
    assert problem.message.endswith(f"where spawn refuses it: {refusal}")
    assert delegated.status is RunStatus.COMPLETED
    assert f"not started: {refusal}" in (delegated.answer or "")


async def test_a_spawned_childs_next_run_keeps_its_spawn_depth(harness: Harness) -> None:
    # A next Run continues the Run it follows: sent to a child at spawn.max_depth, its next
    # Run may spawn no deeper than the child (it started at spawn depth 0, and spawned).
    gate = gated_lookup(harness)
    spec = lead_agent(harness).tool("lookup").spawn(max_depth=1).build()

    def respond(body: dict[str, Any]) -> Reply:
        message, prompt = last(body), system(body)
        if LEAD in prompt:
            if message["role"] == "user":
                return Reply.tool_calls(spawn_call("kid", tools=["lookup"]))
            if message["content"].startswith('{"child"'):
                return Reply.tool_calls(ToolCall("wait_children", {}))
            return Reply.text("lead done")
        if message["role"] == "user" and message["content"] == "spawn a helper":
            return Reply.tool_calls(spawn_call("grandkid"))
        if message["role"] == "user":
            return Reply.tool_calls(ToolCall("lookup", {"term": "x"}))
        return Reply.text(f"kid read: {message['content']}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        kid = workflow_id_for(harness.scope.tenant, f"{run.run_id}-spawn1")

        async def working() -> bool:
            with contextlib.suppress(PsychError):
                return (await harness.client.status(kid, scope=harness.scope)).turn >= 1
            return False

        await eventually(working, what="the kid to work")
        await harness.client.steer(kid, "spawn a helper", scope=harness.scope, mode="next_run")
        gate.set()
        await harness.client.result(run, scope=harness.scope)
        (started,) = of(await records(harness, kid), NextRunStarted)
        result = await harness.client.result(started.workflow_id, scope=harness.scope)
        nexts = await records(harness, started.workflow_id)
    assert of(nexts, ChildSpawned) == []
    assert "spawn depth 2, beyond spawn.max_depth (1)" in (result.answer or "")


async def test_message_child_steers_a_live_child_and_is_absent_without_may_message(
    harness: Harness,
) -> None:
    gate = gated_lookup(harness)
    spec = lead_agent(harness).tool("lookup").spawn().build()
    quiet = (
        AgentBuilder("quiet", registry=harness.registry)
        .model("fake-model")
        .instructions("You work quietly.")
        .spawn(may_message=False)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if "quietly" in system(body):
            return Reply.text("no messaging here")
        if LEAD in system(body):
            if message["role"] == "user":
                return Reply.tool_calls(spawn_call(tools=["lookup"]))
            if message["content"].startswith('{"child"'):
                child = json.loads(message["content"])["child"]
                return Reply.tool_calls(
                    ToolCall("message_child", {"child": child, "message": "the term is y"})
                )
            if message["content"].startswith("sent to"):
                return Reply.tool_calls(ToolCall("wait_children", {}))
            (ending,) = json.loads(message["content"])
            return Reply.text(ending["answer"])
        if message["role"] == "user" and len(body["messages"]) == 2:
            return Reply.tool_calls(ToolCall("lookup", {"term": "x"}))
        return Reply.text(f"child saw: {message['content']}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find", scope=harness.scope)

        async def child_steered() -> bool:
            spawned = of(await records(harness, run), ChildSpawned)
            return bool(spawned) and bool(of(await records(harness, spawned[0].run), SteerReceived))

        await eventually(child_steered, what="the child to receive the message")
        gate.set()
        result = await harness.client.result(run, scope=harness.scope)
        (spawned,) = of(await records(harness, run), ChildSpawned)
        (steer,) = of(await records(harness, spawned.run), SteerReceived)
        silent = await harness.client.dispatch(quiet, "find", scope=harness.scope)
        await harness.client.result(silent, scope=harness.scope)

    assert (steer.message, steer.mode, steer.by) == ("the term is y", "steer", run.run_id)
    # The steer joined the child's next model call, after its tool's result.
    assert result.answer == "child saw: the term is y"
    (quiet_call,) = [b for b in harness.fake.requests if "quietly" in system(b)]
    assert {"spawn", "wait_children"} <= offered(quiet_call)
    assert "message_child" not in offered(quiet_call)


async def test_children_alive_when_the_parent_settles_are_aborted_and_recorded(
    harness: Harness,
) -> None:
    gate = gated_lookup(harness)
    spec = lead_agent(harness).tool("lookup").spawn().suspension(children_expires_seconds=2).build()

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD in system(body):
            if message["role"] == "user":
                return Reply.tool_calls(spawn_call(tools=["lookup"]), usage=USAGE)
            return Reply.tool_calls(ToolCall("wait_children", {}), usage=USAGE)
        return Reply.tool_calls(ToolCall("lookup", {"term": "x"}), usage=USAGE)

    harness.fake.responder = respond
    async with harness.worker():
        try:
            run = await harness.client.dispatch(spec, "find", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            lead = await records(harness, run)
            (spawned,) = of(lead, ChildSpawned)
            child = await harness.client.status(spawned.run, scope=harness.scope)
        finally:
            gate.set()

    assert result.status is RunStatus.ABANDONED
    assert "suspension_expired" in result.reason
    assert child.status is RunStatus.ABORTED
    assert "the parent Run settled" in (child.reason or "")
    (settled,) = of(lead, ChildSettled)
    assert (settled.status, settled.via) == (RunStatus.ABORTED, "spawn")
    assert settled.totals == child.totals
    assert result.totals.model_calls == 2 + child.totals.model_calls
    # child_settled comes before run_settled, the last record.
    assert lead.index(settled) < len(lead) - 1


def started_lookup(harness: Harness, seconds: float) -> asyncio.Event:
    """Register ``lookup``, which takes ``seconds``; the returned event is set as it starts."""
    started = asyncio.Event()

    @harness.registry.register
    async def lookup(term: str) -> str:
        """Look a term up."""
        started.set()
        await asyncio.sleep(seconds)
        return f"{term} = 42"

    return started


def spawning_then(then: ToolCall | str) -> Callable[[dict[str, Any]], Reply]:
    """The lead spawns a child that calls ``lookup``, then calls ``then`` (or answers it),
    then answers; the child's calls are priced too."""

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD not in system(body):
            return Reply.tool_calls(ToolCall("lookup", {"term": "x"}), usage=USAGE)
        if message["role"] == "user":
            return Reply.tool_calls(spawn_call(tools=["lookup"]), usage=USAGE)
        if message["content"].startswith('{"child"') and isinstance(then, ToolCall):
            return Reply.tool_calls(then, usage=USAGE)
        return Reply.text(then if isinstance(then, str) else "done", usage=USAGE)

    return respond


async def test_a_cancelled_parent_aborts_its_spawned_children_and_takes_their_totals(
    harness: Harness,
) -> None:
    # Its workflow cancelled while a spawned child ran, the lead settled without ending it:
    # no child_settled, the lead's totals short of the child's model call, its cost looking
    # known.
    started = started_lookup(harness, 60)
    spec = lead_agent(harness).tool("lookup").spawn().build()
    harness.fake.responder = spawning_then(ToolCall("wait_children", {}))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)
        (spawned,) = of(lead, ChildSpawned)
        child = await harness.client.report(spawned.run, scope=harness.scope)

    assert result.status is RunStatus.ABORTED and result.reason.startswith("cancelled")
    # Aborted, not cancelled: its lookup was cancelled and it settled with its totals.
    assert child.status is RunStatus.ABORTED
    assert "the parent Run settled" in (child.reason or "")
    assert [c.status for c in child.tool_calls] == ["aborted"]
    (settled,) = of(lead, ChildSettled)
    assert (settled.status, settled.via) == (RunStatus.ABORTED, "spawn")
    assert settled.totals == child.totals and child.totals.model_calls == 1
    assert result.totals.model_calls == 3
    assert result.totals.cost == pytest.approx(3 * CALL_COST)
    assert lead.index(settled) == len(lead) - 2  # just before run_settled


async def test_a_spawned_child_that_does_not_end_in_time_makes_the_cost_unknown(
    harness: Harness,
) -> None:
    # The lead answered while its child's lookup (not interruptible) ran on: the child was
    # cancelled after 30 s, and the lead's cost, short of the child's model call, looked
    # known.
    started = started_lookup(harness, 45)

    @harness.registry.register
    async def ready() -> str:
        """Wait until the child works."""
        await started.wait()
        return "ready"

    spec = lead_agent(harness).tool("lookup", interruptible=False).tool("ready").spawn()
    harness.fake.responder = spawning_then(ToolCall("ready", {}))
    async with harness.worker():
        run = await harness.client.dispatch(spec.build(), "find", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)
        (spawned,) = of(lead, ChildSpawned)
        child = await harness.client.status(spawned.run, scope=harness.scope)

    assert (result.status, result.answer) == (RunStatus.COMPLETED, "done")
    assert child.totals.model_calls == 1  # what it spent never reached the lead
    assert result.totals.model_calls == 3
    assert result.totals.cost is None  # never the lead's own cost shown as the whole
    (settled,) = of(lead, ChildSettled)
    assert settled.status is RunStatus.ABORTED
    assert settled.reason == (
        "cancelled: did not end within 30 s of the parent settling "
        "(its totals did not reach this Run)"
    )


async def test_a_terminated_spawned_child_makes_the_cost_unknown(harness: Harness) -> None:
    # An operator terminated the lead's child: its ending was recorded with no totals and
    # the lead's cost, short of the child's model call, looked known.
    started = started_lookup(harness, 60)
    spec = lead_agent(harness).tool("lookup").spawn().build()
    harness.fake.responder = spawning_then(ToolCall("wait_children", {}))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        child_id = workflow_id_for(harness.scope.tenant, f"{run.run_id}-spawn1")
        await harness.client.temporal.get_workflow_handle(child_id).terminate("by hand")
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)

    assert (result.status, result.answer) == (RunStatus.COMPLETED, "done")
    assert result.totals.model_calls == 3  # the lead's own; the child's are not known
    assert result.totals.cost is None
    (settled,) = of(lead, ChildSettled)
    assert settled.status is RunStatus.ABORTED
    assert settled.reason.endswith("(its totals did not reach this Run)")


async def test_a_spawned_child_survives_a_worker_kill_pinned_to_its_hash(
    dev_env: WorkflowEnvironment, fake: FakeModel, tmp_path: Path
) -> None:
    scope = Scope(tenant="acme")
    task_queue = f"spawn-crash-{uuid.uuid4().hex[:12]}"
    spec = (
        AgentBuilder("lead", registry=REGISTRY)
        .model("fake-model")
        .instructions(LEAD)
        .tool("lookup_order")
        .spawn()
        .suspension(may_ask_questions=True)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD in system(body):
            if message["role"] == "user":
                return Reply.tool_calls(spawn_call("courier", tools=["lookup_order"]))
            if message["content"].startswith('{"child"'):
                return Reply.tool_calls(ToolCall("wait_children", {}))
            (ending,) = json.loads(message["content"])
            return Reply.text(f"lead: {ending['answer']}")
        if message["role"] == "user":
            return Reply.tool_calls(ToolCall("ask_question", {"question": "which order?"}))
        if message["content"] == "42":
            return Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}))
        return Reply.text(f"order: {message['content']}")

    fake.responder = respond
    async with doomed_worker(dev_env.client, task_queue, tmp_path, fake.base_url) as doomed:
        psych = doomed.psych
        run = await psych.dispatch(spec, "where is it?", scope=scope)

        def question_mirrored(state: RunState) -> bool:
            return any(p.reason == "question" and p.run for p in state.pending)

        state = await state_when(
            psych, run, scope, question_mirrored, what="the child's question", unsettled=True
        )
        (question,) = [p for p in state.pending if p.reason == "question"]
        os.kill(doomed.proc.pid, signal.SIGKILL)
        await doomed.proc.wait()
        before = await dev_env.client.get_workflow_handle(question.run or "").fetch_history()
        async with doomed.survivor():
            # Answered through the parent's id: the parent forwards it to its child.
            await psych.answer(run, question.id, "42", scope=scope)
            result = await psych.result(run, scope=scope)
            lead = (await psych.records(run, scope=scope)).records
            child = (await psych.records(question.run or "", scope=scope)).records
        assert await publishes(dev_env, run.workflow_id) == 1

    assert result.answer is not None and "delivered" in result.answer
    (spawned,) = of(lead, ChildSpawned)
    assert spawned.run == question.run
    started = before.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert json.loads(started.data)["version"]["hash"] == spawned.version_hash
    (admitted,) = of(child, RunAdmitted)
    assert admitted.version_hash == spawned.version_hash
    # The lead's Version (the client published it) and the child's, published once.
    stored = {p.name for p in (tmp_path / "versions").iterdir()}
    assert stored == {f"{h.split(':')[1]}.json" for h in (run.version_hash, spawned.version_hash)}
    (settled,) = of(lead, ChildSettled)
    assert settled.status is RunStatus.COMPLETED


async def test_a_failed_child_reaches_the_parent_as_a_typed_ending(harness: Harness) -> None:
    spec = lead_agent(harness).spawn().build()

    def respond(body: dict[str, Any]) -> Reply:
        message = last(body)
        if LEAD in system(body):
            if message["role"] == "user":
                return Reply.tool_calls(spawn_call(), usage=USAGE)
            if message["content"].startswith('{"child"'):
                return Reply.tool_calls(ToolCall("wait_children", {}), usage=USAGE)
            return Reply.text(message["content"], usage=USAGE)
        return Reply.error(400, message="the child's request is bad")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        lead = await records(harness, run)

    (spawned,) = of(lead, ChildSpawned)
    (ending,) = json.loads(result.answer or "")
    assert ending == {
        "status": "failed",
        "run": spawned.run,
        "agent": "finder",
        "reason": ending["reason"],
    }
    assert "the child's request is bad" in ending["reason"]
    (settled,) = of(lead, ChildSettled)
    assert (settled.status, settled.reason) == (RunStatus.FAILED, ending["reason"])
    # The failed child's totals ride in its error: its one (failed) call is counted.
    assert settled.totals.model_calls == 1
    assert result.totals.model_calls == 3 + 1
