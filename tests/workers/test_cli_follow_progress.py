"""The live status line's arithmetic (``RunProgress``), on typed records (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from psych_runtime.activities.contract import Latency, Usage
from psych_runtime.specs import Scope
from psych_runtime.workers.console._live import RunProgress
from psych_runtime.workflows import (
    DeltasDropped,
    ModelCallFinished,
    ModelCallStarted,
    Pending,
    Resumed,
    RunAdmitted,
    RunSettled,
    RunStatus,
    StepFinished,
    StepStarted,
    Suspended,
    TokenDelta,
    ToolCallPiece,
    ToolCallStarted,
    Totals,
    TurnStarted,
)

START = datetime(2026, 12, 1, tzinfo=UTC)


def stamp(seconds: float) -> dict[str, Any]:
    return {"seq": 1, "at": START + timedelta(seconds=seconds), "scope": Scope(tenant="t")}


def finished(cost: float | None) -> ModelCallFinished:
    return ModelCallFinished(
        **stamp(1),
        turn=1,
        model="m",
        text="",
        usage=Usage(input_tokens=10, output_tokens=2),
        cost=cost,
        latency=Latency(queue_wait_ms=0, duration_ms=1),
    )


def test_tokens_add_up_and_one_unknown_price_makes_the_cost_unknown() -> None:
    progress = RunProgress()
    progress.add(
        RunAdmitted(**stamp(0), version_hash="h", agent="a", messages=(), system_prompt="")
    )
    progress.add(TurnStarted(**stamp(0), turn=1))
    progress.add(ModelCallStarted(**stamp(0), turn=1, model="m", attempt=1))
    assert progress.doing() == "calling m"
    progress.add(finished(0.5))
    line = progress.status_line(START + timedelta(seconds=75)).plain
    assert line == "turn 1  1 min 15 s  10 in / 2 out tokens  cost 0.500000  working"
    progress.add(finished(None))
    progress.add(finished(0.25))
    line = progress.status_line(START + timedelta(seconds=2)).plain
    assert line == "turn 1  2.0 s  30 in / 6 out tokens  cost unknown  working"


def test_a_wait_shows_until_resumed_and_time_stops_when_the_run_settles() -> None:
    progress = RunProgress()
    progress.add(
        RunAdmitted(**stamp(0), version_hash="h", agent="a", messages=(), system_prompt="")
    )
    progress.add(ToolCallStarted(**stamp(1), turn=1, call_id="c", tool="refund", arguments="{}"))
    assert progress.doing() == "running refund"
    pending = Pending(reason="approval", id="c", call_id="c", tool="refund", expires_at=START)
    progress.add(Suspended(**stamp(1), pending=pending), ("approval of refund({})", "psych x"))
    assert progress.doing() == "suspended"
    assert [line.plain for line in progress.waiting_lines()] == [
        "  waiting for approval of refund({})  psych x"
    ]
    progress.add(Resumed(**stamp(2), reason="approval", id="c", outcome="approved"))
    assert progress.waiting_lines() == []
    # A step's child Run settling does not stop the clock of the Run followed.
    progress.add(StepStarted(**stamp(3), step="s", step_kind="agent", index=1, run="child"))
    progress.add(TurnStarted(**stamp(3), turn=2))  # the child's
    assert progress.status_line(START).plain.startswith("step s  ")
    settled = {"reason": "done", "totals": Totals()}
    progress.add(RunSettled(**stamp(4), status=RunStatus.COMPLETED, **settled))
    progress.add(StepFinished(**stamp(5), step="s", step_kind="agent", ok=True))
    line = progress.status_line(START + timedelta(seconds=10)).plain
    assert line.startswith("after step s  10.0 s  "), line
    progress.add(RunSettled(**stamp(6), status=RunStatus.COMPLETED, **settled))
    assert "  6.0 s  " in progress.status_line(START + timedelta(days=3)).plain


def test_the_text_being_written_shows_until_its_record_and_a_dropped_attempt_vanishes() -> None:
    progress = RunProgress()
    progress.add(ModelCallStarted(**stamp(0), turn=1, model="m", attempt=1))
    progress.take(TokenDelta(call="a#1", turn=1, n=1, text="partial "))
    progress.take(TokenDelta(call="a#1", turn=1, n=2, text="answ"))
    assert [line.plain for line in progress.writing_lines()] == ["  partial answ"]
    progress.take(DeltasDropped(call="a#1", turn=1, reason="the attempt failed"))
    assert progress.writing_lines() == []
    progress.take(TokenDelta(call="b#1", turn=1, n=1, text="Looking\nit up"))
    piece = ToolCallPiece(index=0, id="call_1", name="lookup", arguments='{"id"')
    progress.take(TokenDelta(call="b#1", turn=1, n=2, tool_call=piece))
    more = ToolCallPiece(index=0, arguments=": 1}")
    progress.take(TokenDelta(call="b#1", turn=1, n=3, tool_call=more))
    assert [line.plain for line in progress.writing_lines()] == [
        "  Looking",
        "  it up",
        '  lookup({"id": 1}',
    ]
    progress.add(finished(None))  # the record's line replaces what was being written
    assert progress.writing_lines() == []
