"""The two per-turn caps of ``Limits`` on live Runs (issue 26, item 5).

- ``max_tool_calls_per_turn``: the first calls of the turn, in call order, run; every call
  past the cap gets an error result the model reads, and is recorded like any call. Such a
  call (and one past ``max_steps``) is no failure of its tool: it counts toward no failure
  streak.
- ``max_fanout_per_turn``: at most that many children (``delegate`` and ``spawn`` together)
  start in one turn; a call past it starts nothing and its error says why.

What ran is read from the tool's own calls and the children's records, what the model was
told from the fake model's recorded requests.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    ChildSettled,
    ChildSpawned,
    Record,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
)

from .conftest import Harness

pytestmark = pytest.mark.e2e

LEAD = "You are capslead."
HELPER = "You are capshelper."
SPAWNED = "You are capsspawned."
FANOUT_REFUSAL = (
    "not started: more than max_fanout_per_turn (2) children (delegate, spawn) in one turn"
)

R = TypeVar("R")


def of(records: tuple[Record, ...], kind: type[R]) -> list[R]:
    return [r for r in records if isinstance(r, kind)]


def system(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def tool_messages(body: dict[str, Any]) -> dict[str, str]:
    """The tool results a model request carries, by call id."""
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


async def test_calls_past_max_tool_calls_per_turn_get_an_error_and_do_not_run(
    harness: Harness,
) -> None:
    ran: list[str] = []

    @harness.registry.register
    def caps_lookup(item: str) -> str:
        """Look an item up."""
        ran.append(item)
        return f"{item} is in stock"

    spec = (
        AgentBuilder("capscaller", registry=harness.registry)
        .model("fake-model")
        .tool("caps_lookup")
        .limits(max_tool_calls_per_turn=2)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            *(ToolCall("caps_lookup", {"item": item}, id=f"c-{item}") for item in "abc")
        ),
        Reply.text("a and b are in stock"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "stock of a, b, c?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope, limit=500)).records

    assert result.status is RunStatus.COMPLETED
    assert ran == ["a", "b"]
    refusal = "not run: more than max_tool_calls_per_turn (2) calls in one turn"
    _, second = harness.fake.requests
    assert tool_messages(second) == {
        "c-a": "a is in stock",
        "c-b": "b is in stock",
        "c-c": refusal,
    }
    assert [(r.call_id, r.tool) for r in of(records, ToolCallStarted)] == [
        ("c-a", "caps_lookup"),
        ("c-b", "caps_lookup"),
        ("c-c", "caps_lookup"),
    ]
    assert [(r.call_id, r.status, r.content) for r in of(records, ToolCallFinished)] == [
        ("c-a", "ok", "a is in stock"),
        ("c-b", "ok", "b is in stock"),
        ("c-c", "error", refusal),
    ]
    # Every call the model made counts as a tool call; the steps are the two model calls
    # and the two calls that ran.
    assert (result.totals.tool_calls, result.totals.steps) == (3, 4)


async def test_each_call_not_run_says_which_cap_it_is_past(harness: Harness) -> None:
    # Four calls under a per-turn cap of three with two steps left: the third is within
    # the per-turn cap and is not run because max_steps is used up; the fourth is past
    # both. Each result names its own cap (until 12-06 both named max_tool_calls_per_turn,
    # the cap the third call was not past).
    ran: list[str] = []

    @harness.registry.register
    def caps_fetch(item: str) -> str:
        """Fetch an item."""
        ran.append(item)
        return f"{item} fetched"

    spec = (
        AgentBuilder("capsfetcher", registry=harness.registry)
        .model("fake-model")
        .tool("caps_fetch")
        .limits(max_tool_calls_per_turn=3, max_steps=3)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            *(ToolCall("caps_fetch", {"item": item}, id=f"c-{item}") for item in "abcd")
        ),
        Reply.text("never asked for"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "fetch a to d", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope, limit=500)).records

    assert (result.status, result.reason) == (RunStatus.STOPPED, "max_steps: 3 steps taken")
    assert ran == ["a", "b"]
    assert [(r.call_id, r.status, r.content) for r in of(records, ToolCallFinished)] == [
        ("c-a", "ok", "a fetched"),
        ("c-b", "ok", "b fetched"),
        ("c-c", "error", "not run: the Run's max_steps (3) is used up"),
        ("c-d", "error", "not run: more than max_tool_calls_per_turn (3) calls in one turn"),
    ]
    assert len(harness.fake.requests) == 1


@pytest.mark.parametrize(
    ("limits", "ran", "status"),
    [
        ({"max_tool_calls_per_turn": 1}, 1, RunStatus.COMPLETED),
        ({"max_steps": 3}, 2, RunStatus.STOPPED),
    ],
    ids=["max_tool_calls_per_turn", "max_steps"],
)
async def test_calls_the_run_does_not_run_are_no_failures_of_the_tool(
    harness: Harness, limits: dict[str, int], ran: int, status: RunStatus
) -> None:
    # Eight calls of a tool that never fails, most of them past a cap. Counted as the tool
    # failing (until patch psych-batch-accounting), they withheld it at the default
    # failure_streak_threshold (3) and failed the Run at the default hard stop (6).
    @harness.registry.register
    def caps_count(item: str) -> str:
        """Count an item."""
        return f"{item}: 3 in stock"

    spec = (
        AgentBuilder("capscounter", registry=harness.registry)
        .model("fake-model")
        .tool("caps_count")
        .limits(**limits)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(*(ToolCall("caps_count", {"item": str(n)}) for n in range(8))),
        Reply.text("counted what I could"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "count 0 to 7", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope, limit=500)).records

    assert result.status is status
    assert of(records, ToolWithheld) == []
    assert [r.status for r in of(records, ToolCallFinished)] == ["ok"] * ran + ["error"] * (8 - ran)
    if status is RunStatus.COMPLETED:
        # The next turn still offers the tool, and says nothing of withholding it.
        second = harness.fake.requests[1]
        assert "caps_count" in [t["function"]["name"] for t in second["tools"]]
        assert not any("withheld" in str(m["content"]) for m in second["messages"])


def _lead(harness: Harness, *, spawn: bool) -> AgentBuilder:
    helper = AgentBuilder("capshelper").model("fake-model").instructions(HELPER).build()
    lead = (
        AgentBuilder("capslead", registry=harness.registry)
        .model("fake-model")
        .instructions(LEAD)
        .subagent("capshelper", "Answers one question for the capslead tests.", helper)
        .limits(max_fanout_per_turn=2)
    )
    return lead.spawn() if spawn else lead


def _child(body: dict[str, Any]) -> Reply:
    """A delegated or spawned child: it answers its task back."""
    task = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return Reply.text(f"done: {task}")


async def test_delegations_past_max_fanout_per_turn_start_no_child(harness: Harness) -> None:
    spec = _lead(harness, spawn=False).build()
    calls = [
        ToolCall("delegate", {"agent": "capshelper", "task": f"task {n}"}, id=f"d{n}")
        for n in (1, 2, 3)
    ]

    def respond(body: dict[str, Any]) -> Reply:
        if LEAD not in system(body):
            return _child(body)
        if body["messages"][-1]["role"] == "user":
            return Reply.tool_calls(*calls)
        return Reply.text("two of three done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "three tasks", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope, limit=500)).records

    assert result.status is RunStatus.COMPLETED
    refusal = FANOUT_REFUSAL
    lead_calls = [b for b in harness.fake.requests if LEAD in system(b)]
    assert tool_messages(lead_calls[-1]) == {
        "d1": "done: task 1",
        "d2": "done: task 2",
        "d3": refusal,
    }
    # Exactly two children ran, for the first two calls; the third started nothing.
    child_tasks = sorted(
        b["messages"][-1]["content"] for b in harness.fake.requests if HELPER in system(b)
    )
    assert child_tasks == ["task 1", "task 2"]
    assert sorted((c.call_id, c.run, c.status) for c in of(records, ChildSettled)) == [
        (f"d{n}", f"{run.workflow_id}-sub{n}", RunStatus.COMPLETED) for n in (1, 2)
    ]
    finished = {r.call_id: (r.status, r.content) for r in of(records, ToolCallFinished)}
    assert finished == {
        "d1": ("ok", "done: task 1"),
        "d2": ("ok", "done: task 2"),
        "d3": ("error", refusal),
    }


async def test_spawned_children_count_toward_max_fanout_per_turn(harness: Harness) -> None:
    harness.settings = dataclasses.replace(harness.settings, versions=harness.client.store)
    spec = _lead(harness, spawn=True).build()

    def spawn_call(n: int) -> ToolCall:
        arguments = {"name": f"capsspawned{n}", "instructions": SPAWNED, "task": f"task {n}"}
        return ToolCall("spawn", arguments, id=f"s{n}")

    def respond(body: dict[str, Any]) -> Reply:
        if LEAD not in system(body):
            return _child(body)
        last = body["messages"][-1]
        if last["role"] == "user":
            delegate = ToolCall("delegate", {"agent": "capshelper", "task": "task 0"}, id="d0")
            return Reply.tool_calls(delegate, spawn_call(1), spawn_call(2))
        if last["tool_call_id"] == "s2":
            return Reply.tool_calls(ToolCall("wait_children", {}, id="w"))
        return Reply.text("done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "three tasks", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope, limit=500)).records

    assert result.status is RunStatus.COMPLETED
    refusal = FANOUT_REFUSAL
    lead_calls = [b for b in harness.fake.requests if LEAD in system(b)]
    told = tool_messages(lead_calls[1])
    assert told["d0"] == "done: task 0"
    assert told["s1"].startswith('{"child": "' + run.workflow_id + '-spawn1"')
    assert told["s2"] == refusal
    # The delegated child and one spawned child ran; the second spawn started nothing.
    assert [(c.call_id, c.agent) for c in of(records, ChildSpawned)] == [("s1", "capsspawned1")]
    assert sorted((c.call_id, c.via) for c in of(records, ChildSettled)) == [
        ("d0", "delegate"),
        ("s1", "spawn"),
    ]
    assert sorted(
        b["messages"][-1]["content"] for b in harness.fake.requests if LEAD not in system(b)
    ) == ["task 0", "task 1"]
    finished = {r.call_id: (r.status, r.content) for r in of(records, ToolCallFinished)}
    assert finished["s2"] == ("error", refusal)


@pytest.mark.parametrize("tool", ["delegate", "spawn"])
async def test_children_past_max_fanout_per_turn_are_no_failures_of_the_tool(
    harness: Harness, tool: str
) -> None:
    # Eight children asked for in one turn under a cap of two: six calls start nothing.
    # Counted as the tool failing (until patch psych-fanout-no-failure), they withheld it at
    # the default failure_streak_threshold (3) and failed the Run at the default hard stop
    # (6) with "failure_streak: delegate failed 6 times in a row".
    harness.settings = dataclasses.replace(harness.settings, versions=harness.client.store)
    spec = _lead(harness, spawn=tool == "spawn").build()

    def child_call(n: int) -> ToolCall:
        if tool == "delegate":
            return ToolCall("delegate", {"agent": "capshelper", "task": f"task {n}"}, id=f"c{n}")
        arguments = {"name": f"capsspawned{n}", "instructions": SPAWNED, "task": f"task {n}"}
        return ToolCall("spawn", arguments, id=f"c{n}")

    def respond(body: dict[str, Any]) -> Reply:
        if LEAD not in system(body):
            return _child(body)
        last = body["messages"][-1]
        if last["role"] == "user" and len(body["messages"]) == 2:
            return Reply.tool_calls(*(child_call(n) for n in range(1, 9)))
        if tool == "spawn" and last.get("tool_call_id") == "c8":
            return Reply.tool_calls(ToolCall("wait_children", {}, id="w"))
        return Reply.text("two of eight done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "eight tasks", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope, limit=500)).records

    assert result.status is RunStatus.COMPLETED
    assert of(records, ToolWithheld) == []
    finished = [(r.call_id, r.status) for r in of(records, ToolCallFinished) if r.tool == tool]
    assert finished == [("c1", "ok"), ("c2", "ok")] + [(f"c{n}", "error") for n in range(3, 9)]
    # The next turn still offers the tool, and says nothing of withholding it.
    second = [b for b in harness.fake.requests if LEAD in system(b)][1]
    assert tool in [t["function"]["name"] for t in second["tools"]]
    assert tool_messages(second)["c8"] == FANOUT_REFUSAL
    assert not any("withheld" in str(m["content"]) for m in second["messages"])
