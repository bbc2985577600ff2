"""psych_runtime.workers.console: what ``psych`` prints about a Run.

Record lines and reports (plain text, or styled through rich on a terminal), the live status
line, display components, the transcript built from records, child Runs in a report, and
the model calls' inputs a report read from the blob store.
"""

from psych_runtime.specs import printable
from psych_runtime.workers.console._console import (
    describe_pending,
    format_record,
    format_report,
    format_state,
    format_time,
    format_until,
    print_report,
    resume_command,
)
from psych_runtime.workers.console._follow_run import follow_run
from psych_runtime.workers.console._inputs import (
    format_inputs,
    print_inputs,
    turns_without_calls,
)
from psych_runtime.workers.console._render import output_for, runs_table
from psych_runtime.workers.console._transcript import read_transcript
from psych_runtime.workers.console._transcript_render import print_transcript

__all__ = [
    "describe_pending",
    "follow_run",
    "format_inputs",
    "format_record",
    "format_report",
    "format_state",
    "format_time",
    "format_until",
    "output_for",
    "print_inputs",
    "print_report",
    "print_transcript",
    "printable",
    "read_transcript",
    "resume_command",
    "runs_table",
    "turns_without_calls",
]
