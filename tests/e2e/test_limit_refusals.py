"""Children the Run's own limits refuse are no failures of ``delegate`` or ``spawn``.

A ``spawn`` past ``spawn.max_alive`` or ``spawn.max_depth``, and a ``delegate`` or ``spawn``
whose child would run past a ``max_delegation_depth`` on its chain, start nothing: the
model reads why, and the call counts toward no failure streak (the tool did not fail: the
Run refused), as a call past ``max_fanout_per_turn`` does (``test_per_turn_caps.py``).
Counted (until the patch ``psych-limit-refusals-no-failure``), a model that tried seven
times had the tool withheld at the default ``failure_streak_threshold`` (3) and the Run
failed at the default hard stop (6).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, TypeVar

import pytest

from psych_runtime.specs import AgentBuilder, AgentSpec, DepthCap, Version
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    AGENT_RUN,
    AgentRunInput,
    ChildSpawned,
    Record,
    RunStatus,
    ToolCallFinished,
    ToolWithheld,
    workflow_id_for,
)

from .conftest import Harness

pytestmark = pytest.mark.e2e

LEAD = "You are limitslead."
CHILD = "You are limitschild."

R = TypeVar("R")


def of(records: tuple[Record, ...], kind: type[R]) -> list[R]:
    return [r for r in records if isinstance(r, kind)]


def system(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def spawn_call(n: int) -> ToolCall:
    arguments = {"name": f"limitschild{n}", "instructions": CHILD, "task": f"task {n}"}
    return ToolCall("spawn", arguments, id=f"c{n}")


def delegate_call(n: int) -> ToolCall:
    return ToolCall("delegate", {"agent": "limitshelper", "task": f"task {n}"}, id=f"c{n}")


def _lead(harness: Harness) -> AgentBuilder:
    return (
        AgentBuilder("limitslead", registry=harness.registry)
        .model("fake-model")
        .instructions(LEAD)
        # The fanout cap out of the way: only the limit under test refuses.
        .limits(max_fanout_per_turn=16)
    )


def _max_alive(harness: Harness) -> tuple[AgentSpec, dict[str, Any], ToolCall]:
    spec = _lead(harness).spawn(max_alive=1).build()
    return spec, {}, spawn_call(0)


def _spawn_depth(harness: Harness) -> tuple[AgentSpec, dict[str, Any], ToolCall]:
    # The lead is itself a spawned child at spawn.max_depth: its children would be deeper.
    spec = _lead(harness).spawn(max_depth=1).build()
    return spec, {"spawn_depth": 1}, spawn_call(0)


def _spawn_past_delegation_depth(harness: Harness) -> tuple[AgentSpec, dict[str, Any], ToolCall]:
    # The lead is a subagent at depth 1 under a parent whose max_delegation_depth is 1: a
    # child it spawns would be depth 2.
    spec = _lead(harness).spawn().build()
    caps: tuple[DepthCap, ...] = (("limitsboss", 1),)
    return spec, {"depth": 1, "depth_caps": caps}, spawn_call(0)


def _delegate_past_delegation_depth(
    harness: Harness,
) -> tuple[AgentSpec, dict[str, Any], ToolCall]:
    # A subagent that allows no depth below the root: the validator refuses this tree, so
    # the Run is started unpublished and its delegate is refused at run time.
    helper = (
        AgentBuilder("limitshelper")
        .model("fake-model")
        .instructions(CHILD)
        .limits(max_delegation_depth=0)
        .build()
    )
    spec = _lead(harness).subagent("limitshelper", "Helps the limits tests.", helper).build()
    return spec, {}, delegate_call(0)


CASES = {
    "max_alive": (_max_alive, "spawn.max_alive is 1"),
    "spawn_max_depth": (_spawn_depth, "beyond spawn.max_depth (1)"),
    "spawn_delegation_depth": (
        _spawn_past_delegation_depth,
        "delegation depth 2 exceeds max_delegation_depth 1 of agent 'limitsboss'",
    ),
    "delegate_delegation_depth": (
        _delegate_past_delegation_depth,
        "delegation depth 1 exceeds max_delegation_depth 0 of agent 'limitshelper'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_children_the_limits_refuse_are_no_failures_of_the_tool(
    harness: Harness, case: str
) -> None:
    harness.settings = dataclasses.replace(harness.settings, versions=harness.client.store)
    build, text = CASES[case]
    spec, placement, first = build(harness)
    tool = first.name
    make = spawn_call if tool == "spawn" else delegate_call
    # max_alive: the first call starts a child, the seven after it are refused; the other
    # limits refuse all eight.
    starts = case == "max_alive"

    def respond(body: dict[str, Any]) -> Reply:
        if LEAD not in system(body):
            return Reply.text("child done")
        last = body["messages"][-1]
        if last["role"] == "user":
            return Reply.tool_calls(*(make(n) for n in range(8)))
        if starts and last.get("tool_call_id") == "c7":
            return Reply.tool_calls(ToolCall("wait_children", {}, id="w"))
        return Reply.text("did what the limits allow")

    harness.fake.responder = respond
    run_id = uuid.uuid4().hex
    workflow_id = workflow_id_for(harness.scope.tenant, run_id)
    async with harness.worker():
        # Started as a parent would start it (at a depth, unpublished), not dispatched.
        await harness.env.client.start_workflow(
            AGENT_RUN,
            AgentRunInput(
                run_id=run_id,
                version=Version.of(spec),
                scope=harness.scope,
                messages=("eight tasks",),
                **placement,
            ),
            id=workflow_id,
            task_queue=harness.settings.task_queue,
        )
        result = await harness.client.result(workflow_id, scope=harness.scope)
        records = (await harness.client.records(workflow_id, scope=harness.scope)).records

    assert result.status is RunStatus.COMPLETED, result.reason
    assert of(records, ToolWithheld) == []
    finished = [(r.call_id, r.status) for r in of(records, ToolCallFinished) if r.tool == tool]
    refused = range(1, 8) if starts else range(8)
    assert finished == [("c0", "ok")] * starts + [(f"c{n}", "error") for n in refused]
    contents = [r.content for r in of(records, ToolCallFinished) if r.status == "error"]
    assert all(text in content for content in contents), contents
    assert len(of(records, ChildSpawned)) == (1 if starts else 0)
    # The next turn still offers the tool, and says nothing of withholding it.
    second = [b for b in harness.fake.requests if LEAD in system(b)][1]
    assert tool in [t["function"]["name"] for t in second["tools"]]
    assert not any("withheld" in str(m["content"]) for m in second["messages"])
