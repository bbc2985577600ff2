"""The result of a call that an external completion finished.

A code tool returning ``ExternalWait`` suspends the Run until someone completes its token
with a payload, which becomes the call's result; so does an A2A peer's task the Run waits
on, when an operator completes its ``a2a:`` token by hand. The call's pre hooks ran when it
returned the wait; the payload is its result arriving late, so the call's post hooks see
it, and it is stored as any tool result is (whole within ``large_result_bytes``, else a
handle and a preview): ``psych.tool.finish_external`` on the tools role. The record keeps
the waiting call's arguments and pre hooks' effects, then the post hooks'.

Until 12-06 the payload reached the model as sent, seen by no hook and never stored (an
audit: a post hook masking card numbers never saw a completed payload). A Run recorded
before keeps that reading, asked as the completion arrives (an update's task): patch
``psych-external-result-hooked`` for a code tool's wait, ``psych-a2a-completion-hooked``
(12-07) for a peer's task completed by hand (the peer's own answer is read by
``psych.a2a.poll``, which runs the post hooks itself).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ExternalResultInput,
        ToolCallRequest,
        ToolOutcome,
    )
    from psych_runtime.specs import Limits
    from psych_runtime.workflows.contract._contract import RunInput
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_result import ToolResult, from_outcome, inline

UNFINISHED = (
    "the call was completed, but its result could not be passed through its post hooks and stored"
)
"""What the model reads, with the cause, when ``psych.tool.finish_external`` fails."""


async def external_result(
    call: ToolCallRequest,
    waited: ToolOutcome,
    payload: Any,
    hooked: bool,
    arguments: dict[str, Any],
    run: RunInput,
    limits: Limits,
    kind: Literal["code", "a2a"] = "code",
) -> ToolResult:
    """The result of ``call`` of Run ``run``, which returned ``waited`` and was completed
    with ``payload`` (``hooked``: a call whose post hooks see the payload, of ``kind``;
    ``arguments``: the model's, which its pre hooks may have rewritten)."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    if not hooked or not _patched(kind):
        result = inline(call, "ok", text)
        result.ran = waited
        return result
    ran = waited.ran_arguments if waited.ran_arguments is not None else arguments
    try:
        finished = await calls.finish_external(
            ExternalResultInput(
                run_id=run.run_id,
                call_id=call.id,
                tool=call.name,
                kind=kind,
                arguments=ran,
                text=text,
                large_result_bytes=limits.large_result_bytes,
                scope=run.scope,
            ),
            summary=f"finish tool {call.name} {call.id} with its completion",
        )
    except ActivityError as err:
        if isinstance(err.__cause__, CancelledError):
            raise asyncio.CancelledError from err
        # As any tool activity's failure: the model reads it (the Run goes on). The payload
        # is not shown unhooked: a post hook it did not pass may be what keeps a secret.
        failed = inline(call, "error", f"{UNFINISHED}: {cause_text(err)}")
        failed.ran = waited
        return failed
    stamped = finished.model_copy(
        update={
            "ran_arguments": waited.ran_arguments,
            "hooks": (*waited.hooks, *finished.hooks),
        }
    )
    return from_outcome(call, stamped)


def _patched(kind: Literal["code", "a2a"]) -> bool:
    """Whether this Run's completions of ``kind`` are hooked (asked as one arrives)."""
    if kind == "a2a":
        return workflow.patched("psych-a2a-completion-hooked")
    return workflow.patched("psych-external-result-hooked")
