"""What a finished workflow's history says: its size, and where its time went."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle


@dataclass(frozen=True)
class HistoryFacts:
    """Size and timeline of one workflow history."""

    events: int
    """Number of history events."""
    event_bytes: int
    """Sum of the serialized sizes of the events (protobuf ``ByteSize``)."""
    server_bytes: int
    """The history size the server accounts (what its 50 MB limit is checked against)."""
    turn_ms: float | None
    """Median interval between consecutive model-activity schedulings: steady ms per turn."""
    breakdown_ms: dict[str, float]
    """Total milliseconds per phase (workflow task wait/run, activity wait/run by type)."""
    completed: dict[str, int]
    """Completed activities per activity type."""
    closed_by: str
    """The closing event type (``COMPLETED``, ``TERMINATED``, ...)."""


def _seconds(event: HistoryEvent) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


def _name(event_type: EventType.ValueType) -> str:
    return EventType.Name(event_type).removeprefix("EVENT_TYPE_")


@dataclass(frozen=True)
class Timeline:
    """Where a history's time went."""

    turn_ms: float | None
    breakdown_ms: dict[str, float]
    completed: dict[str, int]


def analyse(events: list[HistoryEvent], model_activity: str) -> Timeline:
    """Timeline of ``events``: per-phase totals, completed activities, turn intervals."""
    scheduled_at: dict[int, float] = {}
    started_at: dict[int, float] = {}
    activity_type: dict[int, str] = {}
    turn_starts: list[float] = []
    breakdown: dict[str, float] = {}
    completed: dict[str, int] = {}

    def add(phase: str, seconds: float) -> None:
        breakdown[phase] = breakdown.get(phase, 0.0) + seconds * 1000

    for event in events:
        at = _seconds(event)
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled_at[event.event_id] = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            attrs = event.workflow_task_started_event_attributes
            add("workflow task: wait", at - scheduled_at[attrs.scheduled_event_id])
            started_at[event.event_id] = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            wft = event.workflow_task_completed_event_attributes
            add("workflow task: run", at - started_at[wft.started_event_id])
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled_at[event.event_id] = at
            activity_type[event.event_id] = name
            if name == model_activity:
                turn_starts.append(at)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs_s = event.activity_task_started_event_attributes
            add("activity: wait", at - scheduled_at[attrs_s.scheduled_event_id])
            started_at[event.event_id] = at
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            act = event.activity_task_completed_event_attributes
            name = activity_type[act.scheduled_event_id]
            add(f"activity: run {name}", at - started_at[act.started_event_id])
            completed[name] = completed.get(name, 0) + 1
    gaps = [b - a for a, b in itertools.pairwise(turn_starts)]
    return Timeline(
        turn_ms=statistics.median(gaps) * 1000 if gaps else None,
        breakdown_ms=breakdown,
        completed=completed,
    )


TURN_PHASES = (
    "workflow task: wait",
    "workflow task: run",
    "activity: wait",
    "activity: run model",
    "activity: run tool",
)
"""The phases of ``turn_phases``: a workflow task's run holds its local activities (they
leave no activity events), an activity's run its body, the SDK and its completion RPC."""


def turn_phases(
    breakdown_ms: dict[str, float], turns: int, model_activities: frozenset[str]
) -> dict[str, float]:
    """``breakdown_ms`` (``HistoryFacts``) as milliseconds per turn in ``TURN_PHASES``:
    activities named in ``model_activities`` are the model's, every other one a tool's."""
    phases = dict.fromkeys(TURN_PHASES, 0.0)
    for phase, ms in breakdown_ms.items():
        name = phase.removeprefix("activity: run ")
        if name != phase:
            phase = "activity: run model" if name in model_activities else "activity: run tool"
        phases[phase] += ms / turns
    return phases


async def history_facts(handle: WorkflowHandle[Any, Any], model_activity: str) -> HistoryFacts:
    """Fetch the history of ``handle`` and describe it; turns start at ``model_activity``."""
    history = await handle.fetch_history()
    events = list(history.events)
    description = await handle.describe()
    info = description.raw_description.workflow_execution_info
    timeline = analyse(events, model_activity)
    return HistoryFacts(
        events=len(events),
        event_bytes=sum(event.ByteSize() for event in events),
        server_bytes=info.history_size_bytes,
        turn_ms=timeline.turn_ms,
        breakdown_ms=timeline.breakdown_ms,
        completed=timeline.completed,
        closed_by=_name(events[-1].event_type) if events else "NONE",
    )
