"""Model retries and fallbacks as pure functions: which model next, how long to wait.

A transient failure costs one unit of the Run's ``transient_retry_budget``; the next
attempt goes to the first model of ``[model, *fallbacks]``, from the next one on, that is
not waiting out a Retry-After or an exponential backoff (from 0.5 s, capped at 30 s), or
else to the one ready soonest. So a fallback that just answered keeps answering while the
primary waits, across turns too. Non-transient failures fail the Run at once.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ErrorType, ModelFailure, UnusedSummary
    from psych_runtime.workflows.kernel._outcome import failure_details

BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0


def ready_model(models: list[str], index: int, not_before: dict[str, float], now: float) -> str:
    """From ``index`` on, in order, the first model ready at ``now``; if none is, the one
    ready soonest."""
    ordered = [models[(index + k) % len(models)] for k in range(len(models))]
    ready = [m for m in ordered if not_before.get(m, 0.0) <= now]
    if ready:
        return ready[0]
    return min(ordered, key=lambda m: not_before.get(m, 0.0))


def retry_delay(failure: ModelFailure, consecutive_failures: int) -> float:
    """How long a model that failed ``consecutive_failures`` times in a row rests: its
    Retry-After when it gave one, else the exponential backoff."""
    if failure.retry_after is not None:
        return failure.retry_after
    return min(BACKOFF_FIRST_SECONDS * 2.0 ** (consecutive_failures - 1), BACKOFF_MAX_SECONDS)


def budget_left(budget: int, spent: int, failure: ModelFailure) -> int:
    """Retries left after ``failure`` (negative: the budget is exhausted)."""
    return budget - spent - (1 if failure.transient else 0)


def model_failure(err: ActivityError, cause_text: str) -> ModelFailure:
    """An activity failure as a ModelFailure (worker loss and timeouts are transient)."""
    cause = err.__cause__
    if (
        isinstance(cause, ApplicationError)
        and cause.type == ErrorType.MODEL_CALL_FAILED
        and cause.details
    ):
        return failure_details(ModelFailure, cause.details[0], ErrorType.MODEL_CALL_FAILED)
    if isinstance(cause, TemporalTimeoutError):
        return ModelFailure(
            transient=True,
            message=f"model call timed out ({cause.type.name if cause.type else 'timeout'})",
        )
    return ModelFailure(transient=True, message=f"model call failed: {cause_text}")


def paid_answer(err: ActivityError) -> UnusedSummary | None:
    """What the answer of a failed model call billed, when one came before the failure
    (storing it, say: the ``ModelCallFailed`` error's second details); None: none came."""
    cause = err.__cause__
    if (
        isinstance(cause, ApplicationError)
        and cause.type == ErrorType.MODEL_CALL_FAILED
        and len(cause.details) > 1
    ):
        return failure_details(UnusedSummary, cause.details[1], ErrorType.MODEL_CALL_FAILED)
    return None
