"""Following a Run on the console: its records as they come (and, in a live view, the
text its model is writing), then its report."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from psych_runtime.specs import Scope
from psych_runtime.workers.console._console import (
    describe_pending,
    format_record,
    print_report,
    resume_command,
)
from psych_runtime.workers.console._live import RunView
from psych_runtime.workers.console._render import output_for
from psych_runtime.workflows import (
    DeltasDropped,
    PsychClient,
    RunHandle,
    RunReport,
    StepStarted,
    Suspended,
    TokenDelta,
)


async def follow_run(
    client: PsychClient,
    run: RunHandle | str,
    *,
    scope: Scope,
    out: TextIO | None = None,
    json_report: bool = False,
    on_record: Callable[[Any], Awaitable[None]] | None = None,
    full: bool = False,
) -> RunReport:
    """Print a Run's records as they arrive, then its report; return the report.

    After a ``suspended`` record it also prints the ``psych`` command that resumes it. On a
    terminal the lines are styled and, on a real TTY, a live status line below them shows
    the turn, the elapsed time, tokens and cost so far and what the Run waits on; piped,
    they are the plain lines of ``format_record``. A Run that has settled already has its
    records printed, then its report.

    Args:
        client: the client the Run is reached through.
        run: the Run (handle or workflow id).
        scope: the caller's Scope (must own the Run).
        out: where to print (standard output by default).
        json_report: print the report as JSON; progress lines then go to standard error,
            so ``out`` holds one JSON document.
        on_record: awaited with each record after it is printed (the demo answers its
            suspension here, so what it does appears in order).
        full: show model text, tool arguments and results whole (``format_record``).
    """
    out = sys.stdout if out is None else out
    progress = sys.stderr if json_report else out
    workflow_id = run.workflow_id if isinstance(run, RunHandle) else run
    view = RunView(output_for(progress))
    view.line(f"Run {workflow_id} on task queue {client.task_queue!r}")
    with view.showing():
        await _follow(client, workflow_id, workflow_id, scope, view, on_record, "", full)
    report = await client.report(run, scope=scope)
    if json_report:
        print(report.model_dump_json(indent=2), file=out, flush=True)
    else:
        print(file=out)
        print_report(report, out)
    return report


async def _follow(
    client: PsychClient,
    root: str,
    workflow_id: str,
    scope: Scope,
    view: RunView,
    on_record: Callable[[Any], Awaitable[None]] | None,
    indent: str,
    full: bool,
) -> None:
    """Print one Run's records; a workflow step's child Run is followed in place, indented
    (steps run one at a time), and its waits are resumed through the root Run's id."""
    # Deltas only where they are shown (a live view), so piped output is as it always was.
    async for record in client.stream(workflow_id, scope=scope, deltas=view.output.live):
        if isinstance(record, TokenDelta | DeltasDropped):
            view.delta(record)
            continue
        text = format_record(record, full=full).replace("\n", "\n" + indent)
        if isinstance(record, Suspended):
            command = resume_command(root, record.pending, scope.tenant)
            view.record(record, indent + text, (describe_pending(record.pending), command))
            if command is not None:
                view.command(f"{indent}    to resume: {command}")
        else:
            view.record(record, indent + text)
        if on_record is not None:
            await on_record(record)
        if isinstance(record, StepStarted) and record.run is not None:
            await _follow(client, root, record.run, scope, view, on_record, indent + "    ", full)
