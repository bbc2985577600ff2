"""Fields a WorkflowSpec shares with AgentSpec that a WorkflowRun has no use for.

``Limits`` and ``SuspensionPolicy`` are one model for both kinds of Spec (the seed's), but a
workflow has steps, not turns: it calls no model, asks no question and delegates to
nothing, and its agent steps are bounded by their own agents' limits. A WorkflowSpec that
sets one of these fields to anything but its default would be accepted and ignored, so
``validate`` reports it, at its path, as a problem naming the field and where the setting
belongs instead. A field left at its default (omitted or written out) is no problem.

``WORKFLOW_READ`` lists the fields a WorkflowRun does read, with what it does with them; a
test checks that the two tables cover every field of both models, so a field added to
either model must be placed in one. Checked at publish only, never at Run admission: a
Version in flight that sets one runs as it always did (no replay changes).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel

from psych_runtime.specs._models import Limits, SuspensionPolicy, WorkflowSpec
from psych_runtime.specs._problem import Problem

_NO_TURNS = "a workflow has steps, not turns"

WORKFLOW_UNREAD: Mapping[str, str] = MappingProxyType(
    {
        "limits.max_turns": (
            f"{_NO_TURNS}: set it on an agent step's agent (limits.max_steps bounds the "
            "workflow's tool steps)"
        ),
        "limits.max_tool_calls_per_turn": (
            f"{_NO_TURNS}: a tool step is one call; set it on an agent step's agent"
        ),
        "limits.max_delegation_depth": (
            "a workflow delegates to nothing: each agent step's agent roots a chain of its "
            "own and is bounded by its own limits.max_delegation_depth"
        ),
        "limits.max_fanout_per_turn": (
            f"{_NO_TURNS}: an agent step's delegations are bounded by its own agent's "
            "limits.max_fanout_per_turn"
        ),
        "limits.stream_idle_seconds": (
            "a workflow calls no model: an agent step's model calls use its own agent's "
            "limits.stream_idle_seconds"
        ),
        "limits.max_history_records": (
            "a WorkflowRun shows no model an earlier conversation: only an agent's Run "
            "continues a thread (dispatch(thread=...), next_run), and a WorkflowRun that "
            "continues as new carries its steps' outputs, not messages"
        ),
        "limits.failure_streak_threshold": (
            "the first failed step ends a WorkflowRun, so no tool of it can fail twice in "
            "a row; set it on an agent step's agent"
        ),
        "limits.failure_streak_hard_stop": (
            "the first failed step ends a WorkflowRun, so no tool of it can fail twice in "
            "a row; set it on an agent step's agent"
        ),
        "limits.repeat_call_hard_stop": (
            "a refused repeat fails its tool step, and the first failed step ends a "
            "WorkflowRun: it stops at the first refusal (limits.repeat_call_threshold) and "
            "never reaches this; set it on an agent step's agent"
        ),
        "suspension.may_ask_questions": (
            "a workflow asks no questions: whether an agent step may ask is its own "
            "agent's suspension.may_ask_questions (a parent imposes only its expiries)"
        ),
    }
)
"""``model.field`` of a WorkflowSpec -> why a WorkflowRun does not read it."""

WORKFLOW_READ: Mapping[str, str] = MappingProxyType(
    {
        "limits.max_steps": (
            "bounds the steps of the whole Run: a tool, agent or workflow step past it "
            "fails unrun, and an agent or nested workflow step takes no more than is left"
        ),
        "limits.deadline_seconds": "the whole Run's deadline, children included",
        "limits.transient_retry_budget": (
            "what is left of it is each agent or nested workflow step's budget"
        ),
        "limits.repeat_call_threshold": (
            "a tool step repeating a call and result that many times is refused: the step "
            "fails, and the Run with it"
        ),
        "limits.large_result_bytes": "a larger tool step output is stored whole (a handle)",
        "suspension.approval_expires_seconds": "tool steps' approvals, and agent steps'",
        "suspension.question_expires_seconds": "agent steps' questions",
        "suspension.external_expires_seconds": "tool steps' external waits, and agent steps'",
        "suspension.children_expires_seconds": "agent steps' waits on their own children",
    }
)
"""``model.field`` of a WorkflowSpec -> what a WorkflowRun does with it."""

_MODELS: Mapping[str, type[BaseModel]] = {"limits": Limits, "suspension": SuspensionPolicy}


def unread_workflow_fields(spec: WorkflowSpec, prefix: str = "") -> list[Problem]:
    """One problem per field of ``spec``'s own limits and suspension that a WorkflowRun
    does not read and that is not at its default (nested workflows are the caller's)."""
    problems = []
    for path, why in WORKFLOW_UNREAD.items():
        part, field = path.split(".")
        model = getattr(spec, part)
        default = _MODELS[part].model_fields[field].get_default(call_default_factory=True)
        if getattr(model, field) != default:
            problems.append(Problem(f"{prefix}{path}", f"a WorkflowRun does not read it: {why}"))
    return problems
