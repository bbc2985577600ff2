"""A WorkflowSpec field a WorkflowRun does not read is a problem at publish, naming the
field (issue 26, item 3); left at its default it is none."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import (
    AgentSpec,
    AgentStep,
    HttpTool,
    Limits,
    ModelRef,
    SuspensionPolicy,
    ToolStep,
    WorkflowSpec,
    WorkflowStepRef,
    spec_from_yaml,
    validate,
)
from psych_runtime.specs._workflow_fields import WORKFLOW_READ, WORKFLOW_UNREAD

NOT_DEFAULT: dict[str, Any] = {
    "limits.max_turns": 5,
    "limits.max_tool_calls_per_turn": 2,
    "limits.max_delegation_depth": 1,
    "limits.max_fanout_per_turn": 2,
    "limits.stream_idle_seconds": 10.0,
    "limits.max_history_records": 7,
    "limits.failure_streak_threshold": 1,
    "limits.failure_streak_hard_stop": 2,
    "limits.repeat_call_hard_stop": 10,
    "suspension.may_ask_questions": True,
}

TOOL = HttpTool(name="fetch", description="Fetch x.", url="http://127.0.0.1:9/x", method="GET")


def agent(**fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": "helper", "model": ModelRef(model="m"), **fields})


def workflow(name: str = "flow", **fields: Any) -> WorkflowSpec:
    steps = (ToolStep(name="get", tool="fetch"), AgentStep(name="think", spec=agent()))
    return WorkflowSpec(**{"name": name, "steps": steps, "tools": (TOOL,), **fields})


def setting(path: str, value: Any) -> dict[str, Any]:
    part, field = path.split(".")
    model = Limits if part == "limits" else SuspensionPolicy
    return {part: model(**{field: value})}


def test_the_tables_cover_every_limits_and_suspension_field() -> None:
    every = {f"limits.{name}" for name in Limits.model_fields}
    every |= {f"suspension.{name}" for name in SuspensionPolicy.model_fields}
    assert set(WORKFLOW_UNREAD) | set(WORKFLOW_READ) == every
    assert not set(WORKFLOW_UNREAD) & set(WORKFLOW_READ)
    assert set(NOT_DEFAULT) == set(WORKFLOW_UNREAD)


@pytest.mark.parametrize("path", sorted(NOT_DEFAULT))
def test_an_unread_field_set_on_a_workflow_is_a_problem_naming_it(path: str) -> None:
    problems = validate(workflow(**setting(path, NOT_DEFAULT[path])))
    assert [(p.path, p.message) for p in problems] == [
        (path, f"a WorkflowRun does not read it: {WORKFLOW_UNREAD[path]}")
    ]


def test_why_max_history_records_is_unread_holds_for_a_run_that_continues_as_new() -> None:
    # A WorkflowRun continues as new between steps (psych-workflow-continue-as-new), so the
    # reason a publisher reads names what it carries instead of denying that it continues.
    reason = WORKFLOW_UNREAD["limits.max_history_records"]
    assert "neither continues as new" not in reason
    assert "continues as new carries its steps' outputs, not messages" in reason


def test_nested_workflows_are_checked_at_their_path() -> None:
    inner = workflow("inner", limits=Limits(max_turns=3, stream_idle_seconds=0))
    outer = WorkflowSpec(name="outer", steps=(WorkflowStepRef(name="sub", spec=inner),))
    assert [p.path for p in validate(outer)] == [
        "steps[sub].spec.limits.max_turns",
        "steps[sub].spec.limits.stream_idle_seconds",
    ]


def test_defaults_written_out_are_no_problem() -> None:
    written = spec_from_yaml(
        """
kind: workflow
name: flow
tools: [{kind: http, name: fetch, description: Fetch x., url: "http://127.0.0.1:9/x", method: GET}]
steps:
  - {kind: tool, name: get, tool: fetch}
limits: {max_turns: 32, max_tool_calls_per_turn: 16, max_delegation_depth: 3,
         max_fanout_per_turn: 4, stream_idle_seconds: 300, max_history_records: 300,
         failure_streak_threshold: 3, failure_streak_hard_stop: 6, max_steps: 5}
suspension: {may_ask_questions: false, approval_expires_seconds: 60}
"""
    )
    assert validate(written) == []


def test_the_same_fields_on_an_agent_or_an_agent_step_are_read() -> None:
    limits = Limits(max_turns=5, max_fanout_per_turn=2, stream_idle_seconds=10)
    asker = agent(limits=limits, suspension=SuspensionPolicy(may_ask_questions=True))
    assert validate(asker) == []
    flow = WorkflowSpec(name="flow", steps=(AgentStep(name="ask", spec=asker),))
    assert validate(flow) == []
