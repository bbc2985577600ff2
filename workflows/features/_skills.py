"""Skills: the ``load_skill`` built-in, offered to an agent that has ``skills``.

The system prompt lists each skill's name and description; ``load_skill`` answers in the
workflow (no activity) with the skill's body, from the Spec the Run pinned.

A call whose arguments do not fit the tool's schema (no ``name``, a name that is no text,
an argument it does not take) is an error naming what is wrong, as a code tool's invalid
arguments are; an unknown name is an error too, as ``delegate``'s unknown subagent is,
its text naming the skills the agent has. A body over ``large_result_bytes`` is stored by
``psych.tool.store_result`` and shown as a handle with a preview, as any tool's large
result is, which ``read_tool_output`` reads on. Until 12-07 every such call was answered
``ok`` (the bad ones as if for a skill named ''), the body whole whatever its size: a Run
recorded before keeps that reading, the patch ``psych-load-skill-checked`` asked only for
such a call, as its turn's calls start (right after the model call's result).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import AgentSpec
    from psych_runtime.workflows.kernel._feature import Builtin, Feature
    from psych_runtime.workflows.kernel._tool_result import (
        ToolResult,
        inline,
        over_bound,
        stored,
    )

LOAD_SKILL = ToolDefinition(
    name="load_skill",
    description="Load the full instructions of one of your skills by name.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name."}},
        "required": ["name"],
        "additionalProperties": False,
    },
)


def checked() -> bool:
    """The patch: bad arguments and an unknown name are errors, a long body is stored."""
    return workflow.patched("psych-load-skill-checked")


def bad_arguments(arguments: dict[str, Any], known: str) -> str | None:
    """What is wrong with ``load_skill``'s ``arguments`` (None: nothing; ``known``: the
    names of the agent's skills)."""
    problems = []
    if "name" not in arguments:
        problems.append("name is missing")
    elif not isinstance(arguments["name"], str):
        problems.append(f"name must be text, not {arguments['name']!r:.100}")
    problems.extend(
        f"{key!r:.100} is not an argument of load_skill" for key in arguments if key != "name"
    )
    if not problems:
        return None
    return (
        f"invalid arguments for load_skill: {'; '.join(problems)}. It takes one argument, "
        f"name: the name of one of your skills ({known})"
    )


class Skills(Feature):
    """``load_skill``: no state of its own."""

    name = "skills"

    def builtins(self) -> tuple[Builtin, ...]:
        return (Builtin("load_skill", self._offer, self._load, executes=True),)

    def _offer(self) -> ToolDefinition | None:
        spec = self.run.spec
        return LOAD_SKILL if isinstance(spec, AgentSpec) and spec.skills else None

    async def _load(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        spec = self.run.spec
        assert isinstance(spec, AgentSpec)
        known = ", ".join(s.name for s in spec.skills)
        problem = bad_arguments(arguments, known)
        if problem is not None and checked():
            return inline(call, "error", problem)
        name = str(arguments.get("name", ""))
        skill = next((s for s in spec.skills if s.name == name), None)
        if skill is None:
            text = f"There is no skill named {name!r}. Skills you have: {known}."
            return inline(call, "error" if checked() else "ok", text)
        limit = self.run.limits.large_result_bytes
        if over_bound(skill.body, limit) and checked():
            summary = f"store the skill {name} {call.name} {call.id} returns"
            return await stored(call, skill.body, limit, summary=summary)
        return inline(call, "ok", skill.body)
