"""``psych report --inputs``: what each model call was sent, as the report read it from
the blob store (``PsychClient.report(..., inputs=...)``): its system prompt as sent, per-turn
context included, then its messages in order."""

from __future__ import annotations

from collections.abc import Collection
from typing import TextIO

from psych_runtime.activities.contract import ChatMessage
from psych_runtime.specs import printable
from psych_runtime.workflows import ModelCallReport, RunReport


def format_inputs(report: RunReport, turns: Collection[int] | None = None) -> str:
    """The inputs of each model call of ``turns`` (None: every call) that ``report`` holds
    (a workflow's: its steps' child Runs'), in order; a call of those turns whose inputs
    are not recorded says why."""
    lines: list[str] = []
    _append(lines, report, "", turns)
    return "\n".join(lines)


def turns_without_calls(report: RunReport, turns: Collection[int]) -> str | None:
    """Why ``turns`` do not all select a model call of ``report`` (its steps' child Runs'
    included), naming the turns that select none and those its calls are of; None when
    each selects one. A turn that selects nothing would read no inputs, silently."""
    present = set(_turns(report))
    missing = sorted(set(turns) - present)
    if not missing:
        return None
    named = ", ".join(map(str, missing))
    have = ", ".join(map(str, sorted(present)))
    calls = f"its model calls are of turn{'s' if len(present) > 1 else ''} {have}"
    return (
        f"{named}: the Run has no model call in turn{'s' if len(missing) > 1 else ''} {named} "
        f"({calls if present else 'it has no model call'})"
    )


def _turns(report: RunReport) -> list[int]:
    turns = [call.turn for call in report.model_calls]
    for step in report.steps:
        if step.child is not None:
            turns += _turns(step.child)
    return turns


def print_inputs(report: RunReport, out: TextIO, turns: Collection[int] | None = None) -> None:
    """Print ``format_inputs(report, turns)`` to ``out``, ``printable``."""
    print(printable(format_inputs(report, turns)), file=out)


def _append(lines: list[str], report: RunReport, where: str, turns: Collection[int] | None) -> None:
    for number, call in enumerate(report.model_calls, 1):
        if turns is not None and call.turn not in turns:
            continue
        title = (
            f"Inputs of {where}model call {number} (turn {call.turn}, {call.model}, "
            f"attempt {call.attempt})"
        )
        if call.messages is None or call.system_prompt is None:
            lines.append(f"{title}: not recorded ({_unrecorded(call)})")
            continue
        lines.append(f"{title}:")
        if call.system_prompt:
            lines += ["── system ──", call.system_prompt]
        for message in call.messages:
            lines += _message(message)
        lines.append("")
    for step in report.steps:
        if step.child is not None:
            _append(lines, step.child, f"step {step.name!r}'s ", turns)


def _unrecorded(call: ModelCallReport) -> str:
    if call.ok is None:
        return "the call is open"
    if call.ok is False:
        return "the attempt failed: no answer, no stored conversation"
    return "a worker of an earlier build recorded the call"


def _message(message: ChatMessage) -> list[str]:
    heading = f"── {message.role}"
    if message.tool_call_id is not None:
        heading += f" [{message.tool_call_id}]"
    lines = [heading + " ──"]
    if message.content:
        lines.append(message.content)
    lines += [f"→ {call.name} [{call.id}] {call.arguments}" for call in message.tool_calls]
    return lines
