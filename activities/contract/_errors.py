"""The ``ApplicationError`` types that cross the workflow/activity/client line.

A raiser passes a member as ``type=`` and a catcher compares ``err.type`` with one: a
``StrEnum`` member is the string itself, so what travels (and what recorded histories and
clients of other versions hold) is the value, which is API and never changes.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorType(StrEnum):
    """Every ``ApplicationError`` type a psych workflow, activity or client raises or reads."""

    BAD_INPUT = "BadInput"
    """A Run's input failed validation at start (the workflow fails, non-retryable)."""
    BLOB_NOT_FOUND = "BlobNotFound"
    """Nothing is stored under a blob ref (``BlobNotFound``, a ``NotFound``)."""
    BLOB_SEAL_REFUSED = "BlobSealRefused"
    """A blob is stored under a ref but its seal does not open with the reading worker's
    keys (``BlobSealRefused``, an ``AccessDenied``): sealed under keys it does not hold,
    stored unsealed, or altered. No retry opens it."""
    COMPACTION_FAILED = "CompactionFailed"
    """``psych.model.compact`` cannot compact the conversation it was given (a mark that is
    not in it, a cut that would part a tool call from its result, an empty summary)."""
    DUPLICATE_TOOL_NAME = "DuplicateToolName"
    """A Run's catalogue names one tool twice."""
    LOCAL_CALL_HOOKED = "LocalCallHooked"
    """A local tool call reached a worker with a hook covering its tool (the Run's catalogue,
    resolved once, came from a worker without it): nothing ran, and the workflow runs the
    call as an activity, where the hooks have their own time."""
    LOCAL_CALL_TIMED_OUT = "LocalCallTimedOut"
    """A local tool call's tool ran past its ``SlimCodeToolCall.local_seconds`` (retried as
    a timeout is: the tool is safe to repeat). The permits check before it is not counted."""
    LOCAL_RESULT_TOO_LARGE = "LocalResultTooLarge"
    """A local tool call's outcome is over its ``SlimCodeToolCall.local_bytes``: the
    workflow runs the call again as an activity (it is safe to repeat)."""
    LOCAL_STORE_FAILED = "LocalStoreFailed"
    """A local store's disk refused a read or a write (``LocalStoreFailed``, a
    ``StoreUnavailable``; before it was an ``ApplicationError`` it travelled under its class
    name, this same value). Non-retryable when its errno lasts (``lasting``: a read-only
    or unwritable directory), which no retry on this worker mends."""
    MCP_CONSENT_REQUIRED = "McpConsentRequired"
    """An MCP server needs a person's consent (``authorization_code``); details are an
    ``McpConsent``. The request never reached the server's tool: the Run suspends and
    retries it."""
    MCP_UNREACHABLE = "McpUnreachable"
    """A model call not made because a required MCP server is down."""
    MODEL_CALL_FAILED = "ModelCallFailed"
    """Every failed model call; its details are a ``ModelFailure``."""
    RESULT_NOT_KEPT = "ResultNotKept"
    """A tool not safe to repeat ran, then its outcome could not be stored (the store did
    not answer): never retried, the Run records the call ``unknown`` (it ran, its result
    is lost), so the model is not invited to run it again (``store_outcome``)."""
    RUN_FAILED = "RunFailed"
    """A Run settled FAILED; its details are the Run's spent totals."""
    TOOL_NOT_REGISTERED = "ToolNotRegistered"
    """A code tool not in the worker's registry; a workflow does not retry it."""


MODEL_CALL_FAILED = ErrorType.MODEL_CALL_FAILED
"""``ErrorType.MODEL_CALL_FAILED`` under the name ``psych_runtime.activities`` exported first."""
