"""The follower's continue-as-new chain steps, as pure functions of pages and events.

Continue-as-new is built on another branch; until it lands here, these say which execution
a follower reads from: ``chain_step`` whether the records after its seq are in the
execution it asked or an earlier one, ``predecessor`` and ``successor`` the executions
before and after one (from its started and close events).
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import (
    HistoryEvent,
    WorkflowExecutionCompletedEventAttributes,
    WorkflowExecutionContinuedAsNewEventAttributes,
    WorkflowExecutionStartedEventAttributes,
)

from psych_runtime.specs import Scope
from psych_runtime.workflows import TurnStarted
from psych_runtime.workflows._contract import RecordsPage
from psych_runtime.workflows._follow import chain_step, predecessor, successor

AT = datetime(2026, 12, 1, tzinfo=UTC)
SCOPE = Scope(tenant="acme")


def page(seqs: range, last_seq: int, settled: bool = False) -> RecordsPage:
    records = tuple(TurnStarted(seq=seq, at=AT, scope=SCOPE, turn=seq) for seq in seqs)
    return RecordsPage(records=records, last_seq=last_seq, settled=settled)


def test_records_after_the_seq_held_by_this_execution_are_read_here() -> None:
    assert chain_step(page(range(6, 9), 8), after=5) == "here"
    assert chain_step(page(range(1, 4), 3), after=0) == "here"


def test_caught_up_is_here() -> None:
    assert chain_step(page(range(0), 8), after=8) == "here"
    assert chain_step(page(range(0), 0), after=0) == "here"


def test_an_execution_that_starts_past_the_seq_sends_the_follower_back() -> None:
    # This execution continues from seq 21; the follower has 5.
    assert chain_step(page(range(21, 24), 23), after=5) == "earlier"
    # Continued as new before writing anything of its own: empty, yet past the seq.
    assert chain_step(page(range(0), 20), after=5) == "earlier"


def test_predecessor_and_successor_read_the_chain_off_the_events() -> None:
    first = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        workflow_execution_started_event_attributes=WorkflowExecutionStartedEventAttributes(),
    )
    later = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        workflow_execution_started_event_attributes=WorkflowExecutionStartedEventAttributes(
            continued_execution_run_id="run-1"
        ),
    )
    assert predecessor(first) is None
    assert predecessor(later) == "run-1"
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
