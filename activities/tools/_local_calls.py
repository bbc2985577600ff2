"""What a code tool's call run as a local activity (``local_seconds``) refuses, so that the
workflow runs it as a normal activity instead (``_activity_calls.call_tool``), and its
failure when the tool runs past its ``local_seconds``.

The refusals are non-retryable (the workflow acts on the first) and benign: an expected
turn of the call, not a warning the worker logs once per call. The timeout is retried.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from psych_runtime.activities.contract import ErrorType, SlimToolOutcome


def hooked_local_call(tool: str) -> ApplicationError:
    """``LocalCallHooked``: a hook of this worker covers ``tool``, but the Run's catalogue
    (resolved once, on a worker without that hook) said local. A local call's bound has
    no room for hooks (``local_seconds`` and the permits check), so nothing runs here."""
    return _as_activity(ErrorType.LOCAL_CALL_HOOKED, f"a hook of this worker covers {tool}")


def local_timed_out(tool: str, seconds: float) -> ApplicationError:
    """``LocalCallTimedOut``: ``tool`` ran past the ``seconds`` its registration gives each
    attempt of a local call (``local_seconds``). Retryable, as the SDK's own timeout of the
    local activity is; the workflow names the bound when the attempts are spent."""
    return ApplicationError(
        f"{tool} did not finish within its local_seconds ({seconds:g} s)",
        type=ErrorType.LOCAL_CALL_TIMED_OUT,
    )


def check_local_bytes(wire: SlimToolOutcome, bound: int | None, tool: str) -> None:
    """Raise ``LocalResultTooLarge`` when ``wire`` is over ``bound`` bytes (its UTF-8 JSON, as
    the payload carries it; None: no bound, an activity's own call).

    Raises:
        ApplicationError: ``LocalResultTooLarge``.
    """
    if bound is not None and len(wire.model_dump_json().encode()) > bound:
        raise _as_activity(
            ErrorType.LOCAL_RESULT_TOO_LARGE,
            f"the outcome of {tool} is over the {bound} bytes a local call may return",
        )


def _as_activity(kind: ErrorType, why: str) -> ApplicationError:
    return ApplicationError(
        f"{why}: it runs as an activity",
        type=kind,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )
