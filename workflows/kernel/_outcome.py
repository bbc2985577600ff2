"""How a Run's body ends: an Outcome, or a Stop raised from deep inside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._records import RunStatus, Undelivered

_M = TypeVar("_M", bound=BaseModel)


@dataclass
class Outcome:
    """The settled state a Run's body reached."""

    status: RunStatus
    reason: str
    answer: str | None = None
    undelivered: tuple[Undelivered, ...] = ()
    """Messages the Run took and never delivered (``RunSettled.undelivered``)."""

    def with_undelivered(self, undelivered: tuple[Undelivered, ...]) -> Outcome:
        """This outcome with ``undelivered``, its reason saying how many (so a reader of
        the reason alone, a result or a parent's record, learns that input was not read)."""
        if not undelivered:
            return self
        many = len(undelivered)
        note = f"{many} message{'s' if many > 1 else ''} sent during the Run not delivered"
        return Outcome(
            self.status,
            f"{self.reason}; {note} (run_settled.undelivered)",
            self.answer,
            undelivered,
        )


class Stop(Exception):
    """Raised inside a Run's body to settle the Run with ``outcome``."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.outcome = Outcome(status, reason)


def failure_details(model: type[_M], details: Any, of: str) -> _M:
    """``details``, of a failure of ``of`` (an activity's ``ErrorType``, a child's
    ``RunFailed``), read as ``model``.

    Failure details are a payload another worker wrote, as a result is, and the SDK hands
    them over unread: during a rolling upgrade one may hold a field of a later build, which
    the contract's models refuse. pydantic's ``ValidationError`` fails the Run
    (``PsychPlugin``), so such details, like such a result (``ActivityPayloadConverter``),
    fail the workflow task instead, retried until a worker that reads them takes it.

    Raises:
        RuntimeError: ``details`` do not validate as ``model`` (the workflow task fails).
    """
    try:
        return model.model_validate(details)
    except ValidationError as err:
        raise RuntimeError(
            f"the details of a {of} failure this worker cannot read as {model.__name__} "
            f"(a worker of a later build sent them?): {err}"
        ) from err
