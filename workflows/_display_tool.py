"""The shape ``update_tasks`` and ``show_component`` share: a built-in offered when an
agent flag is on, whose arguments are parsed by a pure ``specs`` function and either
refused to the model with the reason (``error``) or accepted (``ok``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import AgentSpec
    from psych_runtime.workflows._tool_result import ToolResult, inline

if TYPE_CHECKING:
    from psych_runtime.workflows._tool_calls import ToolCalls


T = TypeVar("T")


def offer_when(
    enabled: Callable[[AgentSpec], bool], definition: ToolDefinition
) -> Callable[[ToolCalls], ToolDefinition | None]:
    """The built-in's ``offer``: ``definition`` when the Run is an agent and
    ``enabled(spec)``, else None (a workflow's steps never get these tools)."""

    def offer(run: ToolCalls) -> ToolDefinition | None:
        spec = run._spec
        return definition if isinstance(spec, AgentSpec) and enabled(spec) else None

    return offer


@dataclass(frozen=True)
class ParsedCall(Generic[T]):
    """The built-in's handler: ``parse`` the arguments; a string is the reason they are
    refused (nothing changes), anything else is handed to ``accept``, which records it
    and returns the ``ok`` text the model reads."""

    parse: Callable[[dict[str, Any]], T | str]
    accept: Callable[[ToolCalls, int, ToolCallRequest, T], str]

    async def __call__(
        self, run: ToolCalls, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        """Refuse or accept one call (the ``Builtin.handle`` signature)."""
        value = self.parse(arguments)
        if isinstance(value, str):
            return inline(call, "error", value)
        return inline(call, "ok", self.accept(run, turn, call, value))
