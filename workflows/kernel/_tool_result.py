"""One tool call's result as a Run takes it, before it is recorded."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ChatMessage,
        McpConsent,
        ToolCallRequest,
        ToolOutcome,
    )
    from psych_runtime.workflows.contract._records import ToolCallStatus


@dataclass
class ToolResult:
    """One call's result as the Run takes it, before it is recorded."""

    call: ToolCallRequest
    status: ToolCallStatus
    message: ChatMessage | str
    """Inline message the workflow made, or the ref of one the activity stored."""
    content: str
    outcome: ToolOutcome | None = None
    counts_as_failure: bool = False
    repeat_refusal: bool = False
    then: Callable[[], Awaitable[ToolResult]] | None = None
    """What the call goes on with once it is no longer open (its activity done): a
    feature's follow-up that waits for a person (an A2A peer's question), so the deadline
    clock stops meanwhile. Its result replaces this one."""
    consent: McpConsent | None = None
    """Not a result: the MCP server needs a person's consent first (the call is retried)."""


def inline(
    call: ToolCallRequest, status: ToolCallStatus, text: str, *, counts: bool | None = None
) -> ToolResult:
    """A result the workflow makes itself (``counts``: whether it counts as the tool
    failing; by default errors and refusals do)."""
    return ToolResult(
        call=call,
        status=status,
        message=ChatMessage(role="tool", content=text, tool_call_id=call.id),
        content=text,
        counts_as_failure=status in ("error", "refused") if counts is None else counts,
    )


def from_outcome(call: ToolCallRequest, outcome: ToolOutcome) -> ToolResult:
    """A tool activity's outcome as the Run takes it."""
    # A wait is not a result: the pipeline sees ``outcome.status`` and suspends on it. A
    # pre hook's denial is no failure of the tool, as a Policy denial is not.
    status: ToolCallStatus = "ok"
    if outcome.status == "error" or outcome.status == "denied":
        status = outcome.status
    return ToolResult(
        call=call,
        status=status,
        message=outcome.message_ref,
        content=outcome.content,
        outcome=outcome,
        counts_as_failure=outcome.status == "error",
    )
