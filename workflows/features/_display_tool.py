"""The shape the task-list and component built-ins share: a built-in offered when an
agent flag is on, whose arguments are parsed by a pure ``specs`` function and either
refused to the model with the reason (``error``) or accepted (``ok``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import AgentSpec
    from psych_runtime.workflows.kernel._feature import Builtin, RunView
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline

T = TypeVar("T")


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A built-in's handling: ``parse`` the arguments; a string is the reason they are
    refused (nothing changes), anything else is handed to ``accept``, which records it and
    returns the ``ok`` text the model reads."""

    parse: Callable[[dict[str, Any]], T | str]
    accept: Callable[[int, ToolCallRequest, T], str]

    def builtin(
        self, run: RunView, definition: ToolDefinition, enabled: Callable[[AgentSpec], bool]
    ) -> Builtin:
        """The built-in ``definition``, offered when the Run is an agent and
        ``enabled(spec)`` (a workflow's steps never get it)."""

        def offer() -> ToolDefinition | None:
            spec = run.spec
            return definition if isinstance(spec, AgentSpec) and enabled(spec) else None

        return Builtin(definition.name, offer, self._handle, executes=True)

    async def _handle(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        value = self.parse(arguments)
        if isinstance(value, str):
            return inline(call, "error", value)
        return inline(call, "ok", self.accept(turn, call, value))
