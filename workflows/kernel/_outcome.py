"""How a Run's body ends: an Outcome, or a Stop raised from deep inside it."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._records import RunStatus, Undelivered


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
