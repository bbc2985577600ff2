"""Large results read back: the ``read_tool_output`` built-in.

A tool result over ``large_result_bytes`` reaches the model as a handle with a preview
(the tool activities store it whole); ``read_tool_output`` reads a window of it back
through the ``psych.tool.read_output`` activity. Offered to every agent.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ReadOutputInput, ToolCallRequest, ToolDefinition
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._feature import Builtin, Feature
    from psych_runtime.workflows.kernel._tool_result import ToolResult, from_outcome, inline

READ_MAX_LENGTH = 65536

READ_TOOL_OUTPUT = ToolDefinition(
    name="read_tool_output",
    description=(
        "Read part of a large tool result that was stored whole and shown to you as a "
        "handle with a preview."
    ),
    parameters={
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "The handle the result gave."},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "length": {"type": "integer", "minimum": 1, "maximum": 65536, "default": 8192},
        },
        "required": ["handle"],
        "additionalProperties": False,
    },
)


def read_arguments(call_id: str, arguments: dict[str, Any]) -> ReadOutputInput | str:
    """``read_tool_output``'s arguments, or the error the model should read."""
    handle, offset, length = (
        arguments.get("handle"),
        arguments.get("offset", 0),
        arguments.get("length", 8192),
    )
    if not isinstance(handle, str) or not handle:
        return "read_tool_output needs a handle (the text after 'handle' in the preview)"
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return f"offset must be a whole number >= 0, not {offset!r}"
    if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= READ_MAX_LENGTH:
        return f"length must be a whole number from 1 to {READ_MAX_LENGTH}, not {length!r}"
    return ReadOutputInput(call_id=call_id, handle=handle, offset=offset, length=length)


class Results(Feature):
    """``read_tool_output``: no state of its own."""

    name = "results"

    def builtins(self) -> tuple[Builtin, ...]:
        return (Builtin("read_tool_output", lambda: READ_TOOL_OUTPUT, self._read, executes=True),)

    async def _read(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        read = read_arguments(call.id, arguments)
        if isinstance(read, str):
            return inline(call, "error", read)
        outcome = await calls.read_output(read, summary=f"tool {call.name}, turn {turn}")
        return from_outcome(call, outcome)
