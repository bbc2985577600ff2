"""Display components: the ``show_component`` built-in.

The model shows a structured payload (a card, carousel, detail, timeline, chart or
metric; the schema and bounds are ``specs._display``'s): an accepted one is a
``ComponentShown`` record, which the report lists and ``psych run`` prints; an invalid one
(a non-http(s) link, a string or list over its cap, an unknown kind) is refused to the
model with the reason (``error``). Components are records only: the Run keeps no state for
them beyond its log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities._payloads import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import COMPONENT_KINDS, COMPONENT_SCHEMA, AgentSpec, parse_component
    from psych_runtime.workflows._records import ComponentShown
    from psych_runtime.workflows._tool_result import ToolResult, inline

if TYPE_CHECKING:
    from psych_runtime.workflows._tool_calls import ToolCalls


SHOW_COMPONENT = ToolDefinition(
    name="show_component",
    description=(
        "Show the person you work for a structured display: one component of kind "
        f"{', '.join(COMPONENT_KINDS)}. Links must be http(s); strings and lists are capped."
    ),
    parameters=COMPONENT_SCHEMA,
)


def offer_components(run: ToolCalls) -> ToolDefinition | None:
    """``show_component`` when the agent has ``components_enabled``."""
    spec = run._spec
    return SHOW_COMPONENT if isinstance(spec, AgentSpec) and spec.components_enabled else None


async def show_component(
    run: ToolCalls, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
) -> ToolResult:
    """Record the component, or refuse it with the reason."""
    component = parse_component(arguments)
    if isinstance(component, str):
        return inline(call, "error", component)
    run._log.add(
        ComponentShown(**run._log.stamp(), turn=turn, call_id=call.id, component=component)
    )
    return inline(call, "ok", f"{component.kind} shown")
