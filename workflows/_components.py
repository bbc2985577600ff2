"""Display components: the ``show_component`` built-in.

The model shows a structured payload (a card, carousel, detail, timeline, chart or
metric; the schema and bounds are ``specs._display``'s): an accepted one is a
``ComponentShown`` record, which the report lists and ``psych run`` prints; an invalid one
(a non-http(s) link, a string or list over its cap, an unknown kind) is refused to the
model with the reason (``error``). Components are records only: the Run keeps no state for
them beyond its log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import (
        COMPONENT_KINDS,
        COMPONENT_SCHEMA,
        AnyComponent,
        parse_component,
    )
    from psych_runtime.workflows._display_tool import ParsedCall, offer_when
    from psych_runtime.workflows._records import ComponentShown

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


offer_components = offer_when(lambda spec: spec.components_enabled, SHOW_COMPONENT)
"""``show_component`` when the agent has ``components_enabled``."""


def _show(run: ToolCalls, turn: int, call: ToolCallRequest, component: AnyComponent) -> str:
    run._log.add(
        ComponentShown(**run._log.stamp(), turn=turn, call_id=call.id, component=component)
    )
    return f"{component.kind} shown"


show_component = ParsedCall[AnyComponent](parse_component, _show)
"""Record the component, or refuse it with the reason."""
