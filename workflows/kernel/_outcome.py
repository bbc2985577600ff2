"""How a Run's body ends: an Outcome, or a Stop raised from deep inside it."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._records import RunStatus


@dataclass
class Outcome:
    """The settled state a Run's body reached."""

    status: RunStatus
    reason: str
    answer: str | None = None


class Stop(Exception):
    """Raised inside a Run's body to settle the Run with ``outcome``."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.outcome = Outcome(status, reason)
