"""Model-written text a person is shown on a terminal (``printable``): a bidirectional
override (U+202E, CVE-2021-42574) or an escape sequence in a task title, a component's
label, the text being written or the answer is shown as its escape, styled or piped; the
records and the report's JSON keep it (pure, typed records; end to end:
``tests/e2e/test_bidi_printed.py``)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from psych_runtime.activities.contract import Latency, Usage
from psych_runtime.specs import Metric, Scope, Task
from psych_runtime.workers.console import format_record, print_report, printable
from psych_runtime.workers.console._live import RunProgress, RunView
from psych_runtime.workers.console._render import output_for
from psych_runtime.workflows import (
    ComponentShown,
    ModelCallFinished,
    ModelCallStarted,
    Pending,
    Record,
    RunAdmitted,
    RunSettled,
    RunState,
    RunStatus,
    Suspended,
    TasksUpdated,
    TokenDelta,
    ToolCallStarted,
    Totals,
)
from psych_runtime.workflows.client._report import build_report

RLO = "\u202e"
LINK = "\x1b]8;;https://evil.test\x07here\x1b]8;;\x07"
"""An OSC 8 hyperlink: text a terminal shows as ``here``, opening another address."""
AT = datetime(2026, 12, 1, tzinfo=UTC)


def stamp(seq: int) -> dict[str, Any]:
    return {"seq": seq, "at": AT, "scope": Scope(tenant="t")}


def test_printable_escapes_what_a_terminal_acts_on_and_keeps_layout() -> None:
    assert printable(f"a{RLO}b \u2066c\u2069 \u202a") == "a\\u202eb \\u2066c\\u2069 \\u202a"
    assert printable(LINK) == "\\x1b]8;;https://evil.test\\x07here\\x1b]8;;\\x07"
    assert printable("\x9b2J \x7f \x00") == "\\x9b2J \\x7f \\x00"
    # Newline, tab and a line ending CRLF stay; a lone CR (overwriting the line) does not.
    assert printable("one\r\ntwo\tthree\rfour\n") == "one\r\ntwo\tthree\\x0dfour\n"
    # The marks reorder nothing beyond themselves; other scripts are text.
    assert printable("\u200e\u200f שלום 你好") == "\u200e\u200f שלום 你好"
    assert printable(printable(f"{RLO}\x1b")) == printable(f"{RLO}\x1b")


def _records() -> list[Record]:
    tasks = (Task(title=f"pay {RLO}cod.exe", status="in_progress"),)
    metric = Metric(label=f"rate {RLO}%5.2", value="2.5")
    usage, latency = Usage(input_tokens=1, output_tokens=1), Latency(queue_wait_ms=0, duration_ms=1)
    answer = f"Refunded {RLO}24 order {LINK}"
    return [
        RunAdmitted(**stamp(1), version_hash="h", agent="a", messages=("hi",), system_prompt=""),
        TasksUpdated(**stamp(2), turn=1, call_id="c1", tasks=tasks),
        ComponentShown(**stamp(3), turn=1, call_id="c2", component=metric),
        ModelCallStarted(**stamp(4), turn=2, model="m", attempt=1),
        ModelCallFinished(**stamp(5), turn=2, model="m", text=answer, usage=usage, latency=latency),
        RunSettled(
            **stamp(6),
            status=RunStatus.COMPLETED,
            reason="answered",
            answer=answer,
            totals=Totals(),
        ),
    ]


def _shown(text: str) -> None:
    assert RLO not in text and "\x1b]8;;https" not in text and "\x07" not in text
    assert "pay \\u202ecod.exe" in text
    assert "metric: rate \\u202e%5.2 = 2.5" in text
    assert "Refunded \\u202e24 order \\x1b]8;;https://evil.test\\x07here" in text


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_the_record_lines_and_the_report_show_each_escaped(
    terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    records = _records()
    tasks = records[1]
    assert isinstance(tasks, TasksUpdated)
    state = RunState(
        run_id="r",
        tenant="t",
        agent="a",
        version_hash="h",
        status=RunStatus.COMPLETED,
        answer=f"Refunded {RLO}24 order {LINK}",
        tasks=tasks.tasks,
        turn=2,
        last_seq=6,
        totals=Totals(),
    )
    report = build_report("psych-t-r", state, records)
    out = io.StringIO()
    view = RunView(output_for(out))
    assert (view.output.console is not None) is terminal
    for record in records:
        view.record(record, format_record(record, full=True))
    print_report(report, out)
    _shown(out.getvalue())
    # The data keeps the exact strings.
    dumped = json.loads(report.model_dump_json())
    assert dumped["answer"] == f"Refunded {RLO}24 order {LINK}"
    assert dumped["tasks"][0]["title"] == f"pay {RLO}cod.exe"
    assert dumped["components"][0]["component"]["label"] == f"rate {RLO}%5.2"


def test_the_live_line_shows_the_text_being_written_and_a_question_escaped() -> None:
    progress = RunProgress()
    progress.add(ModelCallStarted(**stamp(1), turn=1, model="m", attempt=1))
    progress.take(TokenDelta(call="a#1", turn=1, n=1, text=f"so {RLO}far\x1b[2J"))
    assert [line.plain for line in progress.writing_lines()] == ["  so \\u202efar\\x1b[2J"]
    pending = Pending(
        reason="question", id="q", call_id="q", tool="ask", question=RLO, expires_at=AT
    )
    progress.add(Suspended(**stamp(2), pending=pending), (f"an answer to {RLO}", "psych x"))
    assert [line.plain for line in progress.waiting_lines()] == [
        "  waiting for an answer to \\u202e  psych x"
    ]


def test_the_live_status_line_shows_a_tool_name_the_model_wrote_escaped() -> None:
    # The name is the model's as it called it (an unknown tool's too): the status line
    # under the records says what runs now.
    progress = RunProgress()
    progress.add(
        RunAdmitted(**stamp(1), version_hash="h", agent="a", messages=("go",), system_prompt="")
    )
    name = f"look{RLO}up\x1b[2J"
    progress.add(ToolCallStarted(**stamp(2), turn=1, call_id="c", tool=name, arguments="{}"))
    line = progress.status_line(AT).plain
    assert line.endswith("running look\\u202eup\\x1b[2J")
    assert RLO not in line and "\x1b" not in line
