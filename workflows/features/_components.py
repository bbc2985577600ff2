"""Display components: the ``show_component`` built-in.

The model shows a structured payload (a card, carousel, detail, timeline, chart or
metric; the schema and bounds are ``specs``'): an accepted one is a ``ComponentShown``
record, which the report lists and ``psych run`` prints; an invalid one (a non-http(s)
link, a string or list over its cap, an unknown kind) is refused to the model with the
reason (``error``). Components are records only: no state beyond the log.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.specs import (
        COMPONENT_KINDS,
        COMPONENT_SCHEMA,
        AnyComponent,
        parse_component,
    )
    from psych_runtime.workflows.contract._records import ComponentShown
    from psych_runtime.workflows.features._display_tool import Parsed
    from psych_runtime.workflows.kernel._feature import Builtin, Feature

SHOW_COMPONENT = ToolDefinition(
    name="show_component",
    description=(
        "Show the person you work for a structured display: one component of kind "
        f"{', '.join(COMPONENT_KINDS)}. Links must be http(s); strings and lists are capped."
    ),
    parameters=COMPONENT_SCHEMA,
)


class Components(Feature):
    """``show_component``."""

    name = "components"

    def builtins(self) -> tuple[Builtin, ...]:
        return (
            Parsed[AnyComponent](parse_component, self._show).builtin(
                self.run, SHOW_COMPONENT, lambda spec: spec.components_enabled
            ),
        )

    def _show(self, turn: int, call: ToolCallRequest, component: AnyComponent) -> str:
        log = self.run.log
        log.add(ComponentShown(**log.stamp(), turn=turn, call_id=call.id, component=component))
        return f"{component.kind} shown"
