"""Spec fields the seed API defines but this runtime does not implement yet.

A Spec that sets one of them must neither publish nor run: an agent whose ``compaction``
is silently ignored grows its conversation until the provider refuses it, one whose
``mcp_servers`` are ignored answers without the tools it was promised. So ``validate``
reports each use as a problem, and the workflow calls ``unsupported_features`` at Run
admission to fail a Spec that reached it unpublished.

``UNSUPPORTED_FIELDS`` is the table, and ``UNSUPPORTED_VALUES`` the one of fields only some
of whose values work (``McpOAuth.grant``). The change that implements a field (or value)
deletes its entry;
if a committed history was refused for that field, that change breaks its replay and
follows the compatibility policy (``tests/workflows/histories/README.md``). The walk finds
every place a model can appear (the root, subagents' embedded Specs, workflow steps,
nested workflows, the servers of either kind of Spec) from the models themselves.

Pure and deterministic: no I/O, fields visited in declaration order and list entries in
their (already sorted) order, so it is safe inside a workflow and two calls on one Spec
report the same problems in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel

from psych_runtime.specs._models import AgentSpec, WorkflowSpec
from psych_runtime.specs._problem import Problem

UNSUPPORTED_FIELDS: Mapping[str, str] = MappingProxyType({})
"""``Model.field`` -> why a Spec that sets it (to anything but its default) is refused.
Empty: every field of the seed API is implemented (the last, MCP OAuth's authorization_code
fields, went with issue 25; no committed history was refused for them)."""

UNSUPPORTED_VALUES: Mapping[str, Mapping[object, str]] = MappingProxyType({})
"""``Model.field`` -> value -> why a Spec that sets the field to that value is refused (a
field some of whose values work)."""


def _walk(
    spec: BaseModel, table: Mapping[str, str], values: Mapping[str, Mapping[object, str]]
) -> list[Problem]:
    # Depth-first in declaration order (a field, then what it holds, then the next field),
    # with an explicit stack: a Spec that reached a workflow unvalidated may nest deeper
    # than the recursion limit allows. A field's default is computed only for a field the
    # table names.
    found: list[Problem] = []
    pending: list[tuple[BaseModel, str, str | None]] = [(spec, "", None)]
    while pending:
        model, prefix, field = pending.pop()
        cls = type(model)
        if field is None:
            pending.extend((model, prefix, name) for name in reversed(cls.model_fields))
            continue
        value = getattr(model, field)
        name = f"{cls.__name__}.{field}"
        refused = values.get(name)
        if refused is not None and isinstance(value, str) and value in refused:
            found.append(Problem(f"{prefix}{field}", refused[value]))
        reason = table.get(name)
        if reason is not None and value != cls.model_fields[field].get_default(
            call_default_factory=True
        ):
            found.append(Problem(f"{prefix}{field}", reason))
        if isinstance(value, BaseModel):
            pending.append((value, f"{prefix}{field}.", None))
        elif isinstance(value, tuple):
            items = [
                (item, f"{prefix}{field}[{getattr(item, 'name', index)}].", None)
                for index, item in enumerate(value)
                if isinstance(item, BaseModel)
            ]
            pending.extend(reversed(items))
    return found


def unsupported_features(spec: AgentSpec | WorkflowSpec) -> list[Problem]:
    """Every use in ``spec`` of a field this runtime does not implement yet.

    Pure and deterministic, so the workflow may call it at Run admission as well as
    ``validate`` at publish. Empty means everything the Spec asks for is implemented.

    Returns:
        One problem per use, named by its path (``subagents[helper].spec.compaction``),
        in the order the fields are declared.
    """
    return _walk(spec, UNSUPPORTED_FIELDS, UNSUPPORTED_VALUES)
