"""One tool call's result as a Run takes it, before it is recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Collection, Container, Iterable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        CatalogEntry,
        ChatMessage,
        ErrorType,
        McpConsent,
        StoreResultInput,
        ToolCallRequest,
        ToolOutcome,
        invalid_arguments_message,
    )
    from psych_runtime.workflows.contract._records import (
        RunStatus,
        ToolCallFinished,
        ToolCallStatus,
    )
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._guards import repeated_id_message
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._record_log import Stamp


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
    ran: ToolOutcome | None = None
    """The outcome of the tool's run when the result came later (an external wait's
    answer): what it ran with and its hooks' effects are recorded from it."""


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


async def stored(call: ToolCallRequest, text: str, limit: int, *, summary: str) -> ToolResult:
    """``text``, an ``ok`` result the workflow made itself (a child's answer, a skill's
    body), stored by ``psych.tool.store_result`` as a tool activity stores its own: the
    model is shown a handle with a preview (``limit``: the Run's ``large_result_bytes``),
    which ``read_tool_output`` reads on, the handle the Run's own."""
    outcome = await calls.store_result(
        StoreResultInput(call_id=call.id, text=text, large_result_bytes=limit), summary=summary
    )
    return from_outcome(call, outcome)


async def rejected(call: ToolCallRequest, note: str | None, limit: int) -> ToolResult:
    """The result of a call an approver rejected (``note``: what they said), not counted
    as the tool failing. Over ``limit`` (the Run's ``large_result_bytes``) it is stored by
    ``psych.tool.store_result`` and the model shown a handle with a preview, as any large
    result (since the patch ``psych-rejection-note-bounded``, asked only for such a note:
    until 12-07 a note of up to an update's 256 KB reached the model whole). Still
    ``rejected``, and kept out of the repeat guard as before (``guarded_ref``).

    Raises:
        ActivityError: the store failed through its retries (the blob store down): the
            caller makes the result ``unstored`` (since the patch
            ``psych-rejection-unstored-read``), the Run going on.
    """
    text = rejection_text(note)
    if not (over_bound(text, limit) and workflow.patched("psych-rejection-note-bounded")):
        return inline(call, "rejected", text, counts=False)
    outcome = await calls.store_result(
        StoreResultInput(call_id=call.id, text=text, large_result_bytes=limit),
        summary=f"store the rejection of {call.name} {call.id}",
    )
    return ToolResult(
        call=call,
        status="rejected",
        message=outcome.message_ref,
        content=outcome.content,
        outcome=outcome,
    )


def rejection_text(note: str | None) -> str:
    """What the model reads of a call an approver rejected, with their ``note``."""
    said = f" Their note: {note}" if note else ""
    return f"An approver rejected this call.{said}"


def unstored(
    err: ActivityError,
    granted: Callable[[], bool],
    call: ToolCallRequest,
    status: ToolCallStatus,
    text: str,
    limit: int,
    why: str,
) -> ToolResult:
    """A result the workflow made (``text``: a rejection with the approver's note, a
    person's or a child's answer) over ``limit`` that ``psych.tool.store_result`` could not
    store (``err``: its failure through its retries, the blob store down; ``why``: its
    words): its first ``limit`` bytes, and why the rest is not there to read; no failure of
    the tool. The whole stays in the Run's records, where a person's words always are.
    ``granted`` asks the caller's patch (asked only on that failure, after a cancellation
    is ruled out; a Run recorded before failed).

    Raises:
        ActivityError: ``err`` again when the call was cancelled, or the patch is not
            granted (replaying a Run recorded before).
    """
    if isinstance(err.__cause__, CancelledError) or not granted():
        raise err
    whole = text.encode(errors="replace")
    cut = whole[:limit].decode(errors="ignore")
    said = (
        f"{cut}\n\n[Cut here, at {limit} of its {len(whole)} bytes (the Run's "
        f"large_result_bytes); the whole could not be stored for read_tool_output: {why}]"
    )
    return inline(call, status, said, counts=False)


def guarded_ref(result: ToolResult) -> str | None:
    """The result's ref as the repeat guard counts it: none for a call that never ran (a
    rejection whose note was stored has a ref, for ``read_tool_output``, but is no result of
    the tool's)."""
    if result.outcome is None or result.status == "rejected":
        return None
    return result.outcome.result_ref


def over_bound(text: str, limit: int) -> bool:
    """Whether ``text`` is over ``limit`` bytes (``large_result_bytes``) as stored."""
    return len(text.encode(errors="replace")) > limit


def failure_text(entry: CatalogEntry, cause: BaseException | None, said: str) -> str:
    """What the model reads of a tool call whose activity failed (``said``: the failure's
    own words). A local call cut at its ``local_seconds`` names that bound, where the SDK
    says only "Activity timed out": cut by the activity's own bound (``LocalCallTimedOut``,
    the tool past it) or, for a Run recorded before, by the local activity's timeout."""
    timed_out = isinstance(cause, TemporalTimeoutError) or (
        isinstance(cause, ApplicationError) and cause.type == ErrorType.LOCAL_CALL_TIMED_OUT
    )
    if timed_out and entry.local_seconds and calls.runs_local(entry):
        return (
            f"the tool call failed: {entry.name} did not finish within the "
            f"{entry.local_seconds:g} s its registration gives each attempt (local_seconds), "
            f"in {calls.SAFE_TOOL_RETRY.maximum_attempts} attempts"
        )
    return f"the tool call failed: {said}"


def shown(outcome: ToolOutcome) -> str:
    """What the model reads of an outcome completed through a wait (as the tool message a
    tool activity stores: the result, or a handle and a preview)."""
    if not outcome.truncated:
        return outcome.content
    return (
        f"The result was {outcome.size} bytes, too large to show whole; it is stored under "
        f"handle {outcome.result_ref}. Its first {len(outcome.content)} characters follow. "
        f'To read more, call read_tool_output with handle "{outcome.result_ref}" and offset '
        f"{len(outcome.content)}.\n\n{outcome.content}"
    )


def not_run(call: ToolCallRequest, stop: Stop) -> ToolResult:
    """The result of a call that a stop of the Run (an abort, an expiry) kept from running."""
    status: ToolCallStatus = "aborted" if stop.outcome.status is RunStatus.ABORTED else "rejected"
    return inline(call, status, f"not run: {stop.outcome.reason}", counts=False)


def finished(stamp: Stamp, turn: int, result: ToolResult) -> ToolCallFinished:
    """The ``tool_call_finished`` record of ``result``."""
    call = result.call
    outcome = result.outcome
    ran = outcome or result.ran
    return ToolCallFinished(
        **stamp,
        turn=turn,
        call_id=call.id,
        tool=call.name,
        status=result.status,
        content=result.content,
        truncated=outcome.truncated if outcome else False,
        size=outcome.size if outcome else len(result.content.encode()),
        result_ref=outcome.result_ref if outcome else None,
        latency=outcome.latency if outcome else None,
        ran_arguments=ran.ran_arguments if ran else None,
        hooks=ran.hooks if ran else (),
        handles=stored_handles(outcome),
    )


def stored_handles(outcome: ToolOutcome | None) -> tuple[str, ...]:
    """The blobs ``outcome`` names as handles beside its result (an A2A peer's large
    artifacts), the Run's own from its record on (since the patch
    ``psych-a2a-artifact-handles``, asked only for an outcome with any: until 12-08 they
    were on no record, and ``read_tool_output`` refused them as another Run's)."""
    if outcome is None or not outcome.handles:
        return ()
    if not workflow.patched("psych-a2a-artifact-handles"):
        return ()
    return outcome.handles


async def refused_repeated_id(call: ToolCallRequest) -> ToolResult:
    """A call whose id an earlier call of its turn has, not run (a task of its batch): not
    the tool failing, the model (or its provider) numbered the calls wrongly."""
    return inline(call, "error", repeated_id_message(call.id), counts=False)


def arguments_of(call: ToolCallRequest) -> dict[str, Any] | ToolResult:
    """The call's arguments, a JSON object; else the error result the model reads."""
    raw = call.arguments or "{}"
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as err:
        return inline(call, "error", invalid_arguments_message(err))
    if not isinstance(arguments, dict):
        return inline(call, "error", "arguments must be a JSON object")
    if "\\ud" in raw or "\\uD" in raw:  # only an escape can bring one in
        try:
            # Valid JSON may escape half a surrogate pair ("\ud83d", half an emoji): such
            # a string is no text, and no payload can carry it (the workflow task failed
            # on scheduling the call, at every retry).
            json.dumps(arguments, ensure_ascii=False).encode()
        except UnicodeEncodeError as err:
            return inline(call, "error", _half_surrogate(err.object[err.start]))
    return arguments


def _half_surrogate(char: str) -> str:
    """What the model reads when its arguments hold ``char``, half a surrogate pair."""
    return (
        f"arguments are not valid JSON text: \\u{ord(char):04x} is half of a UTF-16 "
        "surrogate pair without its other half; resend"
    )


def unknown_tool(
    call: ToolCallRequest,
    offered: Iterable[str],
    withheld: Container[str],
    whys: tuple[str, ...] = (),
) -> ToolResult:
    """The error result of a call of a tool the Run does not offer (``offered``: what it
    does, ``withheld`` tools left out; ``whys``: why it is not offered, where known)."""
    names = ", ".join(sorted(name for name in offered if name not in withheld))
    said = "".join(f" ({why})" for why in whys)
    return inline(
        call, "error", f"unknown tool {call.name!r}{said}; the tools you have are: {names}"
    )


def consent_refused(call: ToolCallRequest, refused: str) -> ToolResult:
    """The result of a call whose MCP server's consent a person refused: rejected (nothing
    reached the tool, as with an approver's rejection), the model told why."""
    return inline(call, "rejected", f"The tool call was not run: {refused}.", counts=False)


Batch = tuple[int, list[tuple[ToolCallRequest, "asyncio.Task[ToolResult]"]], list[ToolResult]]
"""A Run's batch of calls in flight: its turn, its calls with their tasks, and the results
of the calls past the Run's caps (recorded after them)."""


def unapproved(why: str) -> str:
    """What a call cut short while it waited for its approval says (``why``: the Run's
    ending): it never ran."""
    return f"not run: it was waiting for approval ({why})"


def unqueued(why: str) -> str:
    """What a call cut short while it waited for the identical calls before it in its turn
    says (``why``: the Run's ending): it never ran."""
    return f"not run: it was waiting for the identical calls before it ({why})"


def cut_short(
    batch: list[tuple[ToolCallRequest, asyncio.Task[ToolResult]]],
    why: str,
    *,
    unrun: Collection[str] = (),
    queued: Collection[str] = (),
) -> list[ToolResult]:
    """The results of a batch the Run settles without waiting for (its deadline and grace
    ran out, or it was cancelled), in call order: a call that finished with its result, one
    of ``unrun`` (cut short while it waited for its approval) or of ``queued`` (while it
    waited for the identical calls before it) aborted, any other UNKNOWN (``why``)."""
    results: list[ToolResult] = []
    for call, task in batch:
        done = task.done() and not task.cancelled()
        outcome = task.exception() or task.result() if done else None
        if isinstance(outcome, ToolResult):
            results.append(outcome)
        elif isinstance(outcome, Stop):
            results.append(not_run(call, outcome))
        elif outcome is None and call.id in unrun:
            # UNKNOWN would say it may have run: it never did.
            results.append(inline(call, "aborted", unapproved(why), counts=False))
        elif outcome is None and call.id in queued:
            results.append(inline(call, "aborted", unqueued(why), counts=False))
        else:
            if outcome is not None:  # a defect of the pipeline: not to vanish unseen
                workflow.logger.error("tool call %s failed in the Run: %r", call.id, outcome)
            results.append(inline(call, "unknown", why))
    return results
