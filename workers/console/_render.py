"""Where the ``psych`` command writes: styled for a terminal, plain lines for a pipe.

Terminal detection is rich's, so it follows the conventions people set once for all their
tools: a stream is a terminal when it is a TTY, or when ``FORCE_COLOR`` (non-empty) or
``TTY_COMPATIBLE=1`` says so (``TTY_COMPATIBLE=0`` says it is not); ``NO_COLOR``
(non-empty) drops colours, while bold and dim stay, as no-color.org allows. The live view
of a Run redraws lines, so it needs more than colour: a real TTY that is not a dumb
terminal (``FORCE_COLOR`` in a pipe colours the lines and adds no live view).

Piped output is the plain text of ``_console`` (``format_record``, ``format_report``),
byte for byte what it was before rich: scripts and tests read it.

Every projection a person reads (the record lines, the live line, the report, the status,
the transcript, the inputs) passes the text it shows through ``printable``: model-written
text (an answer, a tool result, a task title, a question) may hold characters a terminal
acts on. The data keeps them: records, ``--json`` output and the API carry the exact string.
``printable`` is ``psych_runtime.specs``' (pure, so workflow code escapes a Run's current
details, which the Temporal UI shows, with it too).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO, assert_never

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from psych_runtime.workers.console._display import display_style
from psych_runtime.workflows import (
    AbortRequested,
    ChildSettled,
    ChildSpawned,
    CompactionApplied,
    CompactionFailed,
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
    RunStatus,
    SteerReceived,
    SteerRefused,
    StepFinished,
    StepStarted,
    Suspended,
    SuspensionExpired,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    TurnStarted,
)

STATUS_STYLES: dict[str, str] = {
    RunStatus.RUNNING: "cyan",
    RunStatus.SUSPENDED: "yellow",
    RunStatus.COMPLETED: "green",
    RunStatus.STOPPED: "yellow",
    RunStatus.FAILED: "red",
    RunStatus.FORCE_SETTLED: "red",
    RunStatus.ABORTED: "red",
    RunStatus.ABANDONED: "red",
}
"""The colour of each Run status wherever one is shown."""

_TOOL_STYLES: dict[str, str] = {
    "ok": "green",
    "error": "red",
    "unknown": "red",
    "refused": "yellow",
    "denied": "yellow",
    "rejected": "yellow",
    "aborted": "red",
}


class _Console(Console):
    """A rich Console whose closed pipe raises, instead of exiting the process itself.

    rich's default answer to EPIPE is ``SystemExit(1)`` from wherever it printed; the
    ``psych`` executable ends on a closed pipe in one place (``_cli.entry``), as POSIX
    tools do.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


@dataclass(frozen=True)
class Output:
    """How one stream is written."""

    file: TextIO
    console: Console | None
    """Set when the stream is a terminal (or forced to be one); None: plain lines."""
    live: bool
    """Whether a live status line may redraw itself here (a real interactive TTY)."""


def output_for(file: TextIO) -> Output:
    """How ``file`` is written (see the module docstring)."""
    console = _Console(file=file, highlight=False, markup=False, emoji=False)
    if not console.is_terminal:
        return Output(file=file, console=None, live=False)
    isatty = getattr(file, "isatty", None)
    try:
        real_tty = bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stream is no terminal
        real_tty = False
    live = real_tty and console.is_interactive and not console.is_dumb_terminal
    return Output(file=file, console=console, live=live)


def record_style(record: Record | None) -> str:
    """The style of a record's line (None: a line that is no record's, unstyled)."""
    match record:
        case RunAdmitted() | StepStarted():
            return "bold"
        case TurnStarted():
            return "bold cyan"
        case ModelCallStarted() | ToolCallStarted():
            return "dim"
        case ModelCallFailed():
            return "yellow" if record.transient else "red"
        case ToolCallFinished():
            return _TOOL_STYLES.get(record.status, "")
        case ToolWithheld() | Suspended():
            return "bold yellow"
        case Resumed():
            return "yellow" if record.outcome == "rejected" else "green"
        case SuspensionExpired() | AbortRequested() | SteerRefused():
            return "red"
        case SteerReceived() | NextRunStarted():
            return "magenta"
        case StepFinished():
            return "green" if record.ok else "red"
        case RunSettled():
            return "bold " + STATUS_STYLES.get(record.status, "")
        case Displayed():
            return display_style(record)
        case (
            ModelCallFinished()
            | McpDiscovered()
            | PeerDiscovered()
            | PeerTaskCanceled()
            | ChildSpawned()
            | ChildSettled()
            | CompactionApplied()
            | CompactionFailed()
            | RunContinued()
            | None
        ):
            return ""  # the terminal's own style: the line's text says all there is
        case _:
            assert_never(record)


def styled_line(text: str, record: Record | None) -> Text:
    """A record's plain line in its style (None: a line that is no record's)."""
    return Text(text, style=record_style(record))


def command_text(text: str) -> Text:
    """A command the user may run next (a resume command), set apart from the records."""
    return Text(text, style="cyan")


def field_grid(fields: Sequence[tuple[str, str]], *, status: str | None = None) -> Table:
    """Name/value rows as a two-column grid that wraps its values to the terminal's width."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in fields:
        style = STATUS_STYLES.get(value, "") if name == "status" and value == status else ""
        grid.add_row(name, Text(value, style=style))
    return grid


def runs_table(
    rows: Sequence[tuple[str, str, str, str]], waits: Sequence[Sequence[str]] | None
) -> Table:
    """The ``psych list`` table: one row per Run, with what it waits on when ``waits``.

    Columns shrink and wrap to the terminal's width; a Run id folds rather than being cut,
    so it can still be read whole.
    """
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("RUN ID", overflow="fold", min_width=12)
    table.add_column("AGENT", overflow="fold")
    table.add_column("STATUS", no_wrap=True)
    table.add_column("STARTED", no_wrap=True)
    if waits is not None:
        table.add_column("WAITING FOR", overflow="fold", ratio=1)
    for index, (run_id, agent, status, started) in enumerate(rows):
        cells: list[RenderableType] = [
            run_id,
            agent,
            Text(status, style=STATUS_STYLES.get(status, "")),
            started,
        ]
        if waits is not None:
            cells.append(Text("\n".join(line.strip() for line in waits[index])))
        table.add_row(*cells)
    return table
