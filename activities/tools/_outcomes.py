"""What every tool activity shares (code, HTTP, ``read_tool_output``, MCP calls and the MCP
search): storing an outcome whole with the message the model is shown, the Policy's fixed
decision for a tool, the running activity's latency, and what an unexpected exception of a
call becomes."""

from __future__ import annotations

import json
import time
import traceback
from typing import Literal

from temporalio import activity
from temporalio.exceptions import ApplicationError

from psych_runtime.activities.blobs import (
    BlobStore,
    Conversations,
    LocalStoreFailed,
    ref_without_storing,
)
from psych_runtime.activities.contract import (
    ChatMessage,
    ErrorType,
    Latency,
    PolicyDecision,
    ToolInfo,
    ToolOutcome,
    well_formed,
)
from psych_runtime.activities.secrets import Redactor
from psych_runtime.activities.tools._policy import Policy
from psych_runtime.specs import StoreUnavailable

_PREVIEW_BYTES = 2048
"""Largest preview shown in place of a result over ``large_result_bytes``."""
MAX_SHOWN_BYTES = 512 * 1024
"""Largest result shown whole (its JSON, as the outcome carries it), whatever
``large_result_bytes`` says (it has no upper bound): an activity's result must fit a
Temporal payload (2 MB), and a larger one failed the activity after the tool had run."""


async def store_outcome(
    blobs: BlobStore,
    call_id: str,
    status: Literal["ok", "error", "wait", "denied"],
    text: str,
    *,
    started: float,
    limit: int | None,
    once: bool = False,
    unsent: bool = False,
) -> ToolOutcome:
    """Store the tool message the model is shown and, when it cannot show the result
    whole, the result.

    A result over ``limit`` bytes, or over ``MAX_SHOWN_BYTES`` as JSON (None: no limit,
    for what is bounded already: a ``read_tool_output`` slice), is stored and shown as a
    handle plus a preview of at most ``_PREVIEW_BYTES``; ``read_tool_output`` reads the
    rest. A result shown whole is not stored apart when the store can name its ref without
    storing it (``KnowsRefs``: every shipped store): its message holds it, and nothing
    reads it by its handle, which is never shown; ``result_ref`` is still the ref ``put``
    would give, what the repeat guard and the records compare. Every tool activity (code,
    HTTP, MCP, the MCP search) stores its outcome through this one function. Call it
    inside the activity (its latency reads the activity's info).

    ``once``: the outcome is of a tool not safe to repeat that ran. A store that does not
    answer then fails the activity ``ResultNotKept``, non-retryable, which the Run records
    as the call's ``unknown`` outcome (it ran; its result is lost), where a plain failure
    would read as an error, inviting the model to call the tool again. ``unsent``: the
    outcome is of a call whose request provably never left (refused before it was sent,
    or never built: ``never_sent``); a store that does not answer then fails saying so,
    which the model reads, where the store's words alone would leave it guessing (a local
    disk's error stays a ``LocalStoreFailed``, non-retryable when it lasts).

    Raises:
        StoreUnavailable: the store did not answer (retried as the activity's policy says;
            a ``LocalStoreFailed`` that lasts is not retried).
        ApplicationError: ``ResultNotKept`` (non-retryable), for ``once``, instead.
    """
    try:
        return await _stored(blobs, call_id, status, text, started=started, limit=limit)
    except StoreUnavailable as err:
        if unsent and not once:
            message = (
                f"the call did not run (its request never left), and its outcome ({status}) "
                f"could not be kept: {err}"
            )
            if isinstance(err, LocalStoreFailed):
                # Still the disk's error: non-retryable when it lasts, as the store raised it.
                raise LocalStoreFailed(
                    message,
                    ref=err.ref,
                    errno_name=err.errno_name,
                    lasting=err.lasting,
                    detail=err.detail,
                ) from None
            raise StoreUnavailable(message, detail=err.detail) from None
        if not once:
            raise
        raise ApplicationError(
            f"the tool ran, but its outcome ({status}) could not be kept: {err}",
            type=ErrorType.RESULT_NOT_KEPT,
            non_retryable=True,
        ) from err


async def _stored(
    blobs: BlobStore,
    call_id: str,
    status: Literal["ok", "error", "wait", "denied"],
    text: str,
    *,
    started: float,
    limit: int | None,
) -> ToolOutcome:
    try:
        data = text.encode()
    except UnicodeEncodeError:
        # Lone surrogates: bytes Python decoded with "surrogateescape" (file names, a
        # subprocess's output), or half a pair. No UTF-8 text holds them, and failing here
        # would tell the model a call that ran had failed: each becomes U+FFFD, as a
        # decoder with errors="replace" would have made the bytes.
        text = well_formed(text)
        data = text.encode()
    if limit is None or (len(data) <= limit and _fits_a_payload(text, data)):
        result_ref = ref_without_storing(blobs, data) or await blobs.put(data)
        content, shown, truncated = text, text, False
    else:
        result_ref = await blobs.put(data)
        # Decoding drops a character the byte cut split in two.
        content = data[: max(0, min(_PREVIEW_BYTES, limit))].decode(errors="ignore")
        shown = (
            f"The result was {len(data)} bytes, too large to show whole; it is stored "
            f"under handle {result_ref}. Its first {len(content)} characters follow. "
            f'To read more, call read_tool_output with handle "{result_ref}" and '
            f"offset {len(content)} (offset and length count characters).\n\n{content}"
        )
        truncated = True
    message_ref = await Conversations(blobs).put_message(
        ChatMessage(role="tool", content=shown, tool_call_id=call_id)
    )
    return ToolOutcome(
        call_id=call_id,
        status=status,
        content=content,
        truncated=truncated,
        size=len(data),
        result_ref=result_ref,
        message_ref=message_ref,
        latency=latency(started),
    )


def _fits_a_payload(text: str, data: bytes) -> bool:
    """Whether ``text`` (``data`` encoded) is within ``MAX_SHOWN_BYTES`` as JSON, where a
    control character takes six bytes (``\\u001b``)."""
    if 6 * len(data) <= MAX_SHOWN_BYTES:
        return True
    return len(json.dumps(text, ensure_ascii=False).encode()) <= MAX_SHOWN_BYTES


def fixed_decision(policy: Policy, info: ToolInfo) -> PolicyDecision | None:
    """The Policy's decision for every call of a tool (None: ask per call).

    An exception inside the policy, or an answer that is no decision, is a deny.
    """
    try:
        decision = policy.fixed(info)
        # Validated here: a policy's malformed answer is its failure (a deny), not a
        # payload the workflow would fail to decode on every retry of its task.
        return None if decision is None else PolicyDecision.model_validate(decision)
    except Exception as err:
        activity.logger.warning("policy failed for %s", info.name, exc_info=True)
        return PolicyDecision(decision="deny", reason=f"the policy failed: {err!r}")


def latency(started: float) -> Latency:
    """Queue wait and duration of the running activity, which started at ``started``."""
    info = activity.info()
    queued = (info.started_time - info.current_attempt_scheduled_time).total_seconds()
    return Latency(
        queue_wait_ms=max(0.0, queued * 1000), duration_ms=(time.monotonic() - started) * 1000
    )


def unexpected(tool: str, err: Exception, redact: Redactor) -> str:
    """The error text the model reads for an exception nothing in a call expected (a
    SecretResolver raising other than ``NotFound``, a bug in building a request), logged
    with its traceback for the operator, every known secret redacted from both.

    Such an exception is the call's error outcome, as a code tool's exception is: the
    on_error hooks run on it and the model reads it, where failing the activity would skip
    both (and Temporal would repeat a call that may not be safe to repeat).
    """
    trace = "".join(traceback.format_exception(err)).rstrip()
    activity.logger.warning("tool %s failed unexpectedly:\n%s", tool, redact(trace))
    text = str(err).strip()
    return redact(
        f"{tool}: {type(err).__name__}: {text}" if text else f"{tool}: {type(err).__name__}"
    )
