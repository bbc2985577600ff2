"""Which execution a reader of a continued Run reads from, as pure functions: ``holder``
(from an execution's ``earlier`` segments: the earlier execution holding the next record,
or this one) and ``successor`` (from a close event: the execution that continues it)."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import (
    HistoryEvent,
    WorkflowExecutionCompletedEventAttributes,
    WorkflowExecutionContinuedAsNewEventAttributes,
)

from psych_runtime.specs import Scope
from psych_runtime.workflows import TurnStarted
from psych_runtime.workflows.client._chain import holder
from psych_runtime.workflows.client._follow import successor
from psych_runtime.workflows.contract._carry import Segment
from psych_runtime.workflows.contract._contract import RecordsPage

AT = datetime(2026, 12, 1, tzinfo=UTC)
SCOPE = Scope(tenant="acme")


EARLIER = (
    Segment(run_id="run-1", first_seq=1, last_seq=20),
    Segment(run_id="run-2", first_seq=21, last_seq=40),
)


def page(seqs: range, last_seq: int, earlier: tuple[Segment, ...] = ()) -> RecordsPage:
    records = tuple(TurnStarted(seq=seq, at=AT, scope=SCOPE, turn=seq) for seq in seqs)
    return RecordsPage(records=records, last_seq=last_seq, settled=False, earlier=earlier)


def test_records_after_the_seq_held_by_this_execution_are_read_here() -> None:
    assert holder(page(range(6, 9), 8), after=5) is None
    assert holder(page(range(1, 4), 3), after=0) is None
    assert holder(page(range(41, 44), 43, EARLIER), after=40) is None


def test_caught_up_is_here() -> None:
    assert holder(page(range(0), 8), after=8) is None
    assert holder(page(range(0), 43, EARLIER), after=43) is None


def test_an_execution_that_starts_past_the_seq_names_the_one_that_holds_it() -> None:
    # This execution continues from seq 41; the follower has 5, then 20, then 25.
    assert holder(page(range(41, 44), 43, EARLIER), after=5) == "run-1"
    assert holder(page(range(41, 44), 43, EARLIER), after=20) == "run-2"
    assert holder(page(range(41, 44), 43, EARLIER), after=25) == "run-2"
    # Continued as new before writing anything of its own: empty, yet past the seq.
    assert holder(page(range(0), 40, EARLIER), after=5) == "run-1"


def test_successor_reads_the_chain_off_the_close_event() -> None:
    continued = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
        workflow_execution_continued_as_new_event_attributes=(
            WorkflowExecutionContinuedAsNewEventAttributes(new_execution_run_id="run-2")
        ),
    )
    completed = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        workflow_execution_completed_event_attributes=WorkflowExecutionCompletedEventAttributes(
            new_execution_run_id="run-cron"
        ),
    )
    assert successor(continued) == "run-2"
    # A completed execution ends the Run even when the server names a next one (a cron's).
    assert successor(completed) is None
