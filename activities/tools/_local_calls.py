"""What a code tool's call run as a local activity (``local_seconds``) refuses, so that the
workflow runs it as a normal activity instead (``_activity_calls.call_tool``).

Both failures are non-retryable (the workflow acts on the first) and benign: an expected
turn of the call, not a warning the worker logs once per call.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from psych_runtime.activities.contract import ErrorType, SlimToolOutcome


def hooked_local_call(tool: str) -> ApplicationError:
    """``LocalCallHooked``: a hook of this worker covers ``tool``, but the Run's catalogue
    (resolved once, on a worker without that hook) said local. ``local_seconds`` bounds
    the whole activity, hooks included, so nothing runs here."""
    return _as_activity(ErrorType.LOCAL_CALL_HOOKED, f"a hook of this worker covers {tool}")


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
