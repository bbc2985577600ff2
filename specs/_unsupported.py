"""Spec fields the seed API defines but this runtime does not implement yet.

A Spec that sets one of them must neither publish nor run: an agent whose ``compaction``
is silently ignored grows its conversation until the provider refuses it, one whose
``mcp_servers`` are ignored answers without the tools it was promised. So ``validate``
reports each use as a problem, and the workflow calls ``unsupported_features`` at Run
admission to fail a Spec that reached it unpublished.

``UNSUPPORTED_FIELDS`` is the live table. The change that implements a field deletes its
entry there; if a committed Run was refused for that field, it also adds a frozen literal
copy of the table as it was (``BEFORE_MCP``, ``BEFORE_TASKS``) that the workflow applies,
behind a ``workflow.patched`` id, to replay such a Run's refusal. The walk finds every
place a model can appear (the root, subagents' embedded Specs, workflow steps, nested
workflows, the servers of either kind of Spec) from the models themselves.

Pure and deterministic: no I/O, fields visited in declaration order and list entries in
their (already sorted) order, so it is safe inside a workflow and two calls on one Spec
report the same problems in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from pydantic import BaseModel

from psych_runtime.specs._models import AgentSpec, WorkflowSpec
from psych_runtime.specs._problem import Problem

UNSUPPORTED_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "AgentSpec.a2a_peers": (
            "A2A delegation is not implemented by this runtime yet; "
            "the agent would run without its peers"
        ),
        "McpServer.oauth": (
            "MCP OAuth is not implemented by this runtime yet; "
            "the server would be called without it"
        ),
    }
)
"""``Model.field`` -> why a Spec that sets it (to anything but its default) is refused."""

_A2A = (
    "A2A delegation is not implemented by this runtime yet; the agent would run without its peers"
)
_COMPACTION = (
    "compaction is not implemented by this runtime yet (issue 10); "
    "the conversation would grow without ever being summarised"
)
_COMPONENTS = (
    "display components are not implemented by this runtime yet (issue 10); "
    "no component tool would be offered"
)
_SPAWN = "spawn is not implemented by this runtime yet (issue 10); no spawn tool would be offered"
_TASKS = (
    "the task list is not implemented by this runtime yet (issue 10); "
    "no task-list tool would be offered"
)
_OAUTH = "MCP OAuth is not implemented by this runtime yet; the server would be called without it"

# The earlier tables are literals, never derived from UNSUPPORTED_FIELDS: each must stay
# what it was when Runs were admitted under it, whatever the live table becomes.

BEFORE_TASKS: Mapping[str, str] = MappingProxyType(
    {
        "AgentSpec.a2a_peers": _A2A,
        "AgentSpec.compaction": _COMPACTION,
        "AgentSpec.components_enabled": _COMPONENTS,
        "AgentSpec.spawn": _SPAWN,
        "AgentSpec.tasks_enabled": _TASKS,
        "McpServer.oauth": _OAUTH,
    }
)
"""The table as it was before the task list, display components, compaction and spawn were
implemented (issue 10): a Run admitted then was refused for ``tasks_enabled``,
``components_enabled``, ``compaction`` or ``spawn``, and its replay must refuse it again
(the workflow's ``psych-tasks`` patch chooses, asked only by a Spec that sets one)."""

BEFORE_MCP: Mapping[str, str] = MappingProxyType(
    {
        # BEFORE_TASKS is frozen too, so spreading it keeps this table what it was.
        **BEFORE_TASKS,
        "AgentSpec.mcp_servers": (
            "MCP servers are not implemented by this runtime yet; "
            "the agent would run without their tools"
        ),
        "WorkflowSpec.mcp_servers": (
            "MCP servers are not implemented by this runtime yet; no step could call their tools"
        ),
    }
)
"""The table as it was before MCP servers were implemented (``BEFORE_TASKS``'s entries and
the two ``mcp_servers`` ones): a Run admitted then was refused for them, and its replay must
refuse it again (the workflow's ``psych-mcp`` patch chooses)."""


def _walk(spec: BaseModel, tables: Sequence[Mapping[str, str]]) -> list[list[Problem]]:
    # Depth-first in declaration order (a field, then what it holds, then the next field),
    # with an explicit stack: a Spec that reached a workflow unvalidated may nest deeper
    # than the recursion limit allows. One walk answers for every table (the workflow asks
    # three at each Run's admission), and a field's default is computed only for a field
    # some table names.
    found: list[list[Problem]] = [[] for _ in tables]
    pending: list[tuple[BaseModel, str, str | None]] = [(spec, "", None)]
    while pending:
        model, prefix, field = pending.pop()
        cls = type(model)
        if field is None:
            pending.extend((model, prefix, name) for name in reversed(cls.model_fields))
            continue
        value = getattr(model, field)
        key = f"{cls.__name__}.{field}"
        reasons = [table.get(key) for table in tables]
        if any(r is not None for r in reasons) and value != cls.model_fields[field].get_default(
            call_default_factory=True
        ):
            for problems, reason in zip(found, reasons, strict=True):
                if reason is not None:
                    problems.append(Problem(f"{prefix}{field}", reason))
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


def unsupported_features(
    spec: AgentSpec | WorkflowSpec, fields: Mapping[str, str] = UNSUPPORTED_FIELDS
) -> list[Problem]:
    """Every use in ``spec`` of a field this runtime does not implement yet.

    Pure and deterministic, so the workflow may call it at Run admission as well as
    ``validate`` at publish. Empty means everything the Spec asks for is implemented.
    ``fields`` is the table to apply (an earlier one, to replay an earlier Run).

    Returns:
        One problem per use, named by its path (``subagents[helper].spec.compaction``),
        in the order the fields are declared.
    """
    return _walk(spec, (fields,))[0]


def unsupported_in_tables(
    spec: AgentSpec | WorkflowSpec, *tables: Mapping[str, str]
) -> tuple[list[Problem], ...]:
    """``unsupported_features(spec, table)`` for each of ``tables``, in one walk of the Spec.

    Returns:
        One list per table, in the order given.
    """
    return tuple(_walk(spec, tables))
