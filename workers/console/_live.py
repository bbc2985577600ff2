"""Showing a Run as it goes: its record lines, and on a terminal a live status line.

``RunProgress`` folds records into what the status line says (turn or step, elapsed time,
tokens and cost so far, what the Run does or waits on); ``RunView`` prints each record's
line (plain, or styled on a terminal) and, on a real TTY, keeps the status line below the
records with rich's Live display. ``_console.follow_run`` drives it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import assert_never

from rich.console import Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from psych_runtime.activities import Usage
from psych_runtime.specs import printable
from psych_runtime.workers.console._display import live_tasks
from psych_runtime.workers.console._render import Output, command_text, styled_line
from psych_runtime.workflows import (
    AbortRequested,
    ChildSettled,
    ChildSpawned,
    CompactionApplied,
    CompactionFailed,
    DeltasDropped,
    Displayed,
    McpDiscovered,
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    NextRunStarted,
    PeerDiscovered,
    PeerTaskCanceled,
    Record,
    Resumed,
    RunAdmitted,
    RunContinued,
    RunSettled,
    SteerReceived,
    SteerRefused,
    StepFinished,
    StepStarted,
    Suspended,
    SuspensionExpired,
    TokenDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    TurnStarted,
)


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{seconds:.1f} s"


WRITING_LINES = 6
"""Lines of the text being written shown under the records (its last ones)."""
WRITING_WIDTH = 160


@dataclass
class _Writing:
    text: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)
    """By index: the tool's name and its arguments so far."""


@dataclass
class RunProgress:
    """What a followed Run (its step's child Runs included) has done so far."""

    started: datetime | None = None
    turn: int = 0
    step: str | None = None
    last_step: str | None = None
    """The step that finished last (a workflow between two steps)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    cost_unknown: bool = False
    """Some call's price was unknown: the cost shown is then "unknown", never a part sum."""
    model: str | None = None
    """The model being called now."""
    tools: list[str] = field(default_factory=list)
    """The tools running now."""
    pending: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """What the Run waits on, by item id: what for, and the command that resumes it."""
    tasks: str | None = None
    """The task list's progress (``2/5 done``), once the Run has set one."""
    settled: RunSettled | None = None
    """The last settled record (a step's child Run settles before its step finishes, so
    the followed Run's own comes last)."""
    writing: dict[str, _Writing] = field(default_factory=dict)
    """What the model call in flight has written so far, by attempt (deltas)."""

    def add(self, record: Record, waiting: tuple[str, str | None] | None = None) -> None:
        """Take one record; ``waiting``: a Suspended record's wait (what it waits for, and
        the command that resumes it)."""
        match record:
            case RunAdmitted():
                self.started = record.at if self.started is None else self.started
            case TurnStarted():
                self.turn = record.turn
            case StepStarted():
                self.step = record.step
            case StepFinished():
                # The turns counted were the step's child Run's: a workflow has none of its own.
                self.step, self.last_step, self.turn = None, record.step, 0
                self.settled = None  # that was the step's child Run settling; this one goes on
            case ModelCallStarted():
                self.model = record.model
            case ModelCallFinished():
                self.model = None
                self.writing.clear()  # the record's line replaces the text as it was written
                self._spent(record.usage, record.cost)
            case ModelCallFailed():
                self.model = None
                self.writing.clear()
                if record.usage is not None:  # its answer came, billed, before it failed
                    self._spent(record.usage, record.cost)
            case ToolCallStarted():
                self.tools.append(record.tool)
            case ToolCallFinished():
                if record.tool in self.tools:
                    self.tools.remove(record.tool)
            case Suspended():
                self.pending[record.pending.id] = waiting or (record.pending.reason, None)
            case Resumed() | SuspensionExpired():
                self.pending.pop(record.id, None)
            case RunSettled():
                self.settled = record
            case Displayed():
                self.tasks = live_tasks(record) or self.tasks
            case (
                ToolWithheld()
                | McpDiscovered()
                | PeerDiscovered()
                | PeerTaskCanceled()
                | AbortRequested()
                | SteerReceived()
                | SteerRefused()
                | NextRunStarted()
                | ChildSettled()
                | ChildSpawned()
                | CompactionApplied()
                | CompactionFailed()
                | RunContinued()
            ):
                # The line shows the turn or step, the model calls' tokens and cost, what
                # runs and what is waited on: none of these records changes any of that.
                pass
            case _:
                assert_never(record)

    def _spent(self, usage: Usage, cost: float | None) -> None:
        """Count a model call's answer: its tokens, and its cost (None: price unknown)."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if cost is None:
            self.cost_unknown = True
        else:
            self.cost = (self.cost or 0.0) + cost

    def doing(self) -> str:
        """What the Run does now, in a few words."""
        # A call waiting for approval is still open: the wait is what holds the Run.
        if self.pending:
            return "suspended"
        if self.model is not None:
            return f"calling {self.model}"
        if self.tools:
            return "running " + ", ".join(self.tools)
        return "working"

    def status_line(self, now: datetime) -> Text:
        """The one line under the records: where the Run is, how long, tokens and cost."""
        if self.step:
            where = f"step {self.step}"
        elif self.turn:
            where = f"turn {self.turn}"
        else:
            where = f"after step {self.last_step}" if self.last_step else "starting"
        # A settled Run's time stops at its settling (following an old Run shows its length).
        end = self.settled.at if self.settled is not None else now
        took = _elapsed((end - self.started).total_seconds()) if self.started else "-"
        known = not self.cost_unknown and self.cost is not None
        cost = f"cost {self.cost:.6f}" if known else "cost unknown"
        line = Text()
        line.append(where, style="bold cyan")
        line.append(f"  {took}  ")
        line.append(f"{self.input_tokens} in / {self.output_tokens} out tokens", style="dim")
        line.append(f"  {cost}  ", style="dim")
        if self.tasks is not None:
            line.append(f"tasks {self.tasks}  ", style="blue")
        # A tool's name is the model's as it called it (an unknown tool's too).
        line.append(printable(self.doing()), style="yellow" if self.pending else "")
        return line

    def take(self, delta: TokenDelta | DeltasDropped) -> None:
        """Take a piece of the answer being written, or drop a failed attempt's."""
        if isinstance(delta, DeltasDropped):
            self.writing.pop(delta.call, None)
            return
        pieces = self.writing.setdefault(delta.call, _Writing())
        if delta.text:
            pieces.text.append(delta.text)
        if delta.tool_call is not None:
            call = pieces.calls.setdefault(delta.tool_call.index, ["", ""])
            call[0] = call[0] or delta.tool_call.name or ""
            call[1] += delta.tool_call.arguments

    def writing_lines(self) -> list[Text]:
        """The text (and tool calls) the model is writing now, its last lines."""
        lines: list[Text] = []
        for pieces in self.writing.values():
            text = "".join(pieces.text)
            for line in text.splitlines()[-WRITING_LINES:] if text.strip() else []:
                lines.append(Text("  " + printable(line[-WRITING_WIDTH:]), style="italic"))
            for name, arguments in pieces.calls.values():
                called = printable(f"  {name}({arguments[-WRITING_WIDTH:]}")
                lines.append(Text(called, style="dim italic"))
        return lines

    def waiting_lines(self) -> list[Text]:
        """One line per pending item (what it waits for and the command that resumes it)."""
        lines = []
        for what, command in self.pending.values():
            line = Text("  waiting for ", style="yellow")
            line.append(printable(what))
            if command:
                line.append("  ")
                line.append_text(command_text(printable(command)))
            lines.append(line)
        return lines


class _Status:
    """The live display's content, drawn afresh each refresh (the elapsed time moves)."""

    def __init__(self, progress: RunProgress) -> None:
        self._progress = progress
        self._spinner = Spinner("dots")

    def __rich__(self) -> RenderableType:
        progress = self._progress
        self._spinner.text = progress.status_line(datetime.now(UTC))
        return Group(*progress.writing_lines(), self._spinner, *progress.waiting_lines())


class RunView:
    """Prints a followed Run: its record lines, and on a real terminal the status line."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.progress = RunProgress()
        self._live: Live | None = None

    def line(self, text: str, record: Record | None = None) -> None:
        """Print one line (a record's, styled by it on a terminal)."""
        console = self.output.console
        if console is None:
            print(text, file=self.output.file, flush=True)
        else:
            console.print(styled_line(text, record), soft_wrap=True)

    def command(self, text: str) -> None:
        """Print a command the user may run next (it may quote what a server sent)."""
        console = self.output.console
        if console is None:
            print(printable(text), file=self.output.file, flush=True)
        else:
            console.print(command_text(printable(text)), soft_wrap=True)

    def record(
        self, record: Record, text: str, waiting: tuple[str, str | None] | None = None
    ) -> None:
        """Print a record's line and take its progress (``waiting``: see RunProgress.add)."""
        self.line(text, record)
        self.progress.add(record, waiting)
        if self._live is not None:
            self._live.refresh()

    def delta(self, delta: TokenDelta | DeltasDropped) -> None:
        """Show a piece of the answer being written (a live view only: it is transient,
        replaced by the call's record line, and a dropped attempt's text disappears)."""
        self.progress.take(delta)
        if self._live is not None:
            self._live.refresh()

    @contextlib.contextmanager
    def showing(self) -> Iterator[None]:
        """Keep the live status line while the block runs (on a real terminal only).

        The line is transient: it is gone once the Run settles, and the report follows.
        """
        console = self.output.console
        if not self.output.live or console is None:
            yield
            return
        # Anything else printed to the standard streams meanwhile (the demo's own lines)
        # is shown above the status line rather than through it.
        live = Live(
            _Status(self.progress),
            console=console,
            refresh_per_second=4,
            transient=True,
            redirect_stdout=console.file is sys.stdout,
            redirect_stderr=console.file is sys.stderr,
        )
        with live:
            self._live = live
            try:
                yield
            finally:
                self._live = None
