"""How the task list, components and per-turn context print (``workers/console/_display.py``) in
``psych run``'s lines, its live status line and ``psych status`` (pure, typed records)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from psych_runtime.activities import ContextShown, ContextSkipped
from psych_runtime.specs import Metric, Scope, Task
from psych_runtime.workers.console import format_record, format_state
from psych_runtime.workers.console._live import RunProgress
from psych_runtime.workflows import (
    ComponentShown,
    ContextProvided,
    RunState,
    RunStatus,
    TasksUpdated,
    Totals,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
TASKS = (Task(title="look up", status="completed"), Task(title="refund", status="in_progress"))


def stamp(seconds: float = 0) -> dict[str, Any]:
    return {"seq": 1, "at": START + timedelta(seconds=seconds), "scope": Scope(tenant="t")}


def test_a_task_change_prints_the_list_and_shows_on_the_live_line() -> None:
    record = TasksUpdated(**stamp(), turn=1, call_id="c", tasks=TASKS)
    assert format_record(record) == "  tasks (1/2 done):\n      [x] look up\n      [~] refund"
    progress = RunProgress(started=START)
    progress.add(record)
    assert "tasks 1/2 done" in progress.status_line(START).plain


def test_a_component_and_a_context_call_print_one_line_each() -> None:
    metric = Metric(label="rate", value="2.5", unit="%", link="https://x.test/r")
    shown = format_record(ComponentShown(**stamp(), turn=1, call_id="c", component=metric))
    assert shown == "  shown metric: rate = 2.5 %\n      link: https://x.test/r"
    context = ContextProvided(
        **stamp(),
        turn=1,
        shown=(ContextShown(provider="crm", ref="sha256:ab", tokens=12),),
        skipped=(ContextSkipped(provider="slow", reason="timeout", detail="no answer"),),
        budget_tokens=2000,
    )
    assert format_record(context) == "  context: crm 12 tokens of 2000; skipped slow timeout"


def _running(**fields: Any) -> RunState:
    """A running Run's state with ``fields``."""
    return RunState(
        run_id="r",
        tenant="t",
        agent="a",
        version_hash="h",
        status=RunStatus.RUNNING,
        turn=1,
        last_seq=3,
        totals=Totals(),
        **fields,
    )


def test_status_shows_the_task_list() -> None:
    state = _running(tasks=TASKS)
    assert "tasks:        [x] look up\n              [~] refund" in format_state("w", state)


def test_status_names_the_tools_the_tenants_permits_withdrew() -> None:
    state = _running(withdrawn_tools=("send_mail", "ping"))
    assert format_state("w", state).endswith("\nwithdrawn:    send_mail, ping")
    assert "withdrawn" not in format_state("w", state.model_copy(update={"withdrawn_tools": ()}))
