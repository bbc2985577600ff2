"""Skills: the ``load_skill`` built-in, offered to an agent that has ``skills``.

The system prompt lists each skill's name and description; ``load_skill`` answers in the
workflow (no activity) with the skill's whole body, from the Spec the Run pinned.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import AgentSpec
    from psych_runtime.workflows.kernel._feature import Builtin, Feature
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline

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
        name = str(arguments.get("name", ""))
        skill = next((s for s in spec.skills if s.name == name), None)
        if skill is None:
            known = ", ".join(s.name for s in spec.skills)
            return inline(
                call, "ok", f"There is no skill named {name!r}. Skills you have: {known}."
            )
        return inline(call, "ok", skill.body)
