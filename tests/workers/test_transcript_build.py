"""``build_transcript`` on record logs no fake-model Run makes easily: a withheld tool, an
expired approval, steering that came too late (pure, no server)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from psych_runtime.activities.contract import Latency, Usage
from psych_runtime.specs import Scope
from psych_runtime.workers.console._transcript import Wait, build_transcript
from psych_runtime.workers.console._transcript_render import transcript_lines, transcript_markdown
from psych_runtime.workflows import (
    ModelCallFinished,
    Pending,
    RunAdmitted,
    RunSettled,
    RunStatus,
    SteerReceived,
    Suspended,
    SuspensionExpired,
    SuspensionReason,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    Totals,
    TurnStarted,
)

AT = datetime(2026, 12, 1, tzinfo=UTC)


class Log:
    """Records with a gapless seq, as a Run writes them."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def stamp(self) -> dict[str, Any]:
        return {"seq": len(self.records) + 1, "at": AT, "scope": Scope(tenant="t")}

    def add(self, kind: type[Any], **fields: Any) -> None:
        self.records.append(kind(**self.stamp(), **fields))


def call(log: Log, turn: int, *names: str) -> None:
    log.add(TurnStarted, turn=turn)
    log.add(
        ModelCallFinished,
        turn=turn,
        model="m",
        text="",
        tool_calls=tuple({"id": f"c{turn}{n}", "name": n, "arguments": "{}"} for n in names),
        usage=Usage(),
        latency=Latency(queue_wait_ms=0, duration_ms=1),
    )


def test_withheld_note_follows_the_turns_results_and_late_steering_is_unseen() -> None:
    log = Log()
    log.add(RunAdmitted, version_hash="h", agent="a", messages=("hi",), system_prompt="sys")
    call(log, 1, "flaky", "other")
    for name in ("flaky", "other"):
        log.add(ToolCallStarted, turn=1, call_id=f"c1{name}", tool=name, arguments="{}")
    log.add(ToolCallFinished, turn=1, call_id="c1flaky", tool="flaky", status="error", content="x")
    log.add(ToolWithheld, tool="flaky", failures=3)
    log.add(ToolCallFinished, turn=1, call_id="c1other", tool="other", status="ok", content="y")
    call(log, 2, "other")
    log.add(ToolCallStarted, turn=2, call_id="c2other", tool="other", arguments="{}")
    log.add(
        Suspended,
        pending=Pending(
            reason="approval", id="c2other", call_id="c2other", tool="other", expires_at=AT
        ),
    )
    log.add(SteerReceived, mode="steer", message="too late", by="bob")
    log.add(SuspensionExpired, reason="approval", id="c2other")
    log.add(
        ToolCallFinished,
        turn=2,
        call_id="c2other",
        tool="other",
        status="rejected",
        content="not run: expired",
    )
    log.add(RunSettled, status=RunStatus.ABANDONED, reason="expired", totals=Totals())

    transcript = build_transcript("psych-t-1", log.records)

    roles = [(m.role, m.origin, m.tool) for m in transcript.messages]
    assert roles == [
        ("system", "system", None),
        ("user", "input", None),
        ("assistant", "model", None),
        ("tool", "tool", "flaky"),
        ("tool", "tool", "other"),  # the note comes after all of the turn's results
        ("user", "runtime", None),
        ("assistant", "model", None),
        ("tool", "tool", "other"),
    ]
    note = transcript.messages[5]
    assert not note.exact and "flaky" in note.content
    assert transcript.messages[-1].waits == (
        Wait(reason=SuspensionReason.APPROVAL, outcome="expired"),
    )
    assert [(m.content, m.by) for m in transcript.unseen] == [("too late", "bob")]
    assert (transcript.status, transcript.reason) == ("abandoned", "expired")

    text = "\n".join(line for line, _ in transcript_lines(transcript))
    assert "approval: expired, nobody answered" in text
    assert "── user (the runtime's note) ──" in text
    assert "(its exact wording is the runtime's, not recorded" in text
    assert "── user (steer message from bob), after the last model call ──\ntoo late" in text
    assert "## user (steer message from bob), after the last model call\n\ntoo late" in (
        transcript_markdown(transcript)
    )
