"""What a Run's catalogue says of an HTTP tool and of a built-in: the definition the model
is shown, and the facts the workflow and the Policy read (``ToolActivities.catalog``)."""

from __future__ import annotations

from psych_runtime.activities.contract import (
    CatalogEntry,
    PolicyDecision,
    ToolDefinition,
    ToolInfo,
)
from psych_runtime.activities.tools._http import NOT_SAFE_TO_REPEAT
from psych_runtime.specs import HttpTool


def http_definition(tool: HttpTool) -> ToolDefinition:
    """The definition the model is shown of ``tool``."""
    # Validation reads a schema without "type" as an object; providers refuse a function
    # whose parameters do not say so (OpenAI's 400: "schema must be a JSON Schema of
    # 'type: object'").
    parameters = {"type": "object", "properties": {}, **tool.input_schema}
    return ToolDefinition(name=tool.name, description=tool.description, parameters=parameters)


def http_info(tool: HttpTool) -> ToolInfo:
    """What the Policy reads of ``tool``: HTTP's own semantics annotate a request (GET is
    safe, read-only; DELETE destroys; everything else is a write, as an unannotated tool
    is)."""
    return ToolInfo(
        name=tool.name,
        kind="http",
        read_only=tool.method == "GET" or None,
        destructive=tool.method == "DELETE" or None,
    )


def http_safe_to_repeat(tool: HttpTool) -> bool:
    """Whether a call of ``tool`` may run again (its method is safe or idempotent)."""
    return tool.method not in NOT_SAFE_TO_REPEAT


def builtin_entry(builtin: ToolDefinition) -> CatalogEntry:
    """A built-in's entry: it acts only on the Run itself; the Policy governs tools of the
    world."""
    return CatalogEntry(
        name=builtin.name,
        kind="builtin",
        safe_to_repeat=True,
        info=ToolInfo(name=builtin.name, kind="builtin", read_only=True),
        policy=PolicyDecision(decision="allow", reason="built-in"),
    )
