"""Large results read back: the ``read_tool_output`` built-in.

A tool result over ``large_result_bytes`` reaches the model as a handle with a preview
(the tool activities store it whole); ``read_tool_output`` reads a window of it back
through the ``psych.tool.read_output`` activity. Offered to every agent.

It reads only the Run's own results: a handle one of its tool calls was shown as (its
``tool_call_finished`` records, carried across continue-as-new), or one its parent handed
it when it is a child Run. A parent hands a child exactly the refs of the child's messages
that are its own (``ParentBounds.handed``, ``kernel/_handles.py``): a workflow its tool
steps' stored outputs and those its child steps hand back (``RunResult.handles``), an
agent the handles it was shown that its model wrote into a subagent's task. A caller's
messages hand nothing, and neither does text: a ref a caller (or a prompt-injected model)
writes into a child's task is not the parent's, so no Run can be pointed at another Run's
result, or another tenant's, by naming its hash. Any other ref,
another Run's or another tenant's, is refused with the error a missing one gets, before the
blob store is asked, so a Run cannot tell whether it exists. (Runs in flight before this
rule keep reading as they did: the patch ``read-own-results``, through ``RunView.patched``.)
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ReadOutputInput, ToolCallRequest, ToolDefinition
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._feature import Builtin, Feature
    from psych_runtime.workflows.kernel._handles import RESULTS, own_handles
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


def not_found(handle: str) -> str:
    """What reading a handle that is not there (or not the Run's) answers: the activity's
    own text for a missing blob, so the two cannot be told apart."""
    return f"no stored tool output with handle {handle!r}"


class Results(Feature):
    """``read_tool_output``, and the handles of earlier executions of a continued Run."""

    name = RESULTS

    def builtins(self) -> tuple[Builtin, ...]:
        return (Builtin("read_tool_output", lambda: READ_TOOL_OUTPUT, self._read, executes=True),)

    def _own(self) -> frozenset[str]:
        return own_handles(self.run)

    def carry(self) -> Any:
        return sorted(self._own()) or None

    def restore(self, carried: Any) -> None:
        """Nothing to take back: ``own_handles`` reads the carry off the Run's input."""

    async def _read(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        read = read_arguments(call.id, arguments)
        if isinstance(read, str):
            return inline(call, "error", read)
        # The patch: a Run reads only its own results (a Run recorded before replays as it ran).
        if read.handle not in self._own() and self.run.patched("read-own-results"):
            return inline(call, "error", not_found(read.handle))
        outcome = await calls.read_output(read, summary=f"tool {call.name}, turn {turn}")
        return from_outcome(call, outcome)
