"""Walking a Spec and every Spec nested in it: subagents' embedded Specs, workflow steps'
agents and nested workflows."""

from __future__ import annotations

from collections.abc import Iterator

from psych_runtime.specs._models import AgentSpec, AgentStep, WorkflowSpec, WorkflowStepRef


def nested_specs(
    spec: AgentSpec | WorkflowSpec, prefix: str = ""
) -> Iterator[tuple[str, AgentSpec | WorkflowSpec]]:
    """``spec`` and every Spec nested in it, each with the path prefix of its fields
    (``""``, ``subagents[s].spec.``, ``steps[t].spec.``, ...), a Spec before those it
    holds, in declaration order."""
    yield prefix, spec
    if isinstance(spec, AgentSpec):
        for sub in spec.subagents:
            yield from nested_specs(sub.spec, f"{prefix}subagents[{sub.name}].spec.")
        return
    for step in spec.steps:
        if isinstance(step, AgentStep | WorkflowStepRef):
            yield from nested_specs(step.spec, f"{prefix}steps[{step.name}].spec.")
