"""A transcript (``_transcript``) for people: lines for a terminal or a pipe, or Markdown.

Text the model saw is printed whole and as it was, never reflowed: the terminal wraps long
lines to its width, and Markdown puts the system prompt, tool arguments and tool results
in fences (longer than any backtick run inside them, so no content can close one). Only
what a terminal would act on, or what would reorder the text around it, is written as its
escape (``printable``), in the lines and the Markdown alike.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO, assert_never

from rich.text import Text

from psych_runtime.specs import printable
from psych_runtime.workers.console._render import STATUS_STYLES, output_for
from psych_runtime.workers.console._transcript import Message, StepTranscript, Transcript, Wait
from psych_runtime.workflows import SuspensionReason

_ROLE_STYLES = {"system": "bold magenta", "user": "bold blue", "assistant": "bold green"}


def _wait_text(wait: Wait) -> str:
    match wait.reason:
        case SuspensionReason.APPROVAL:
            what = "approval"
        case SuspensionReason.QUESTION:
            what = "question"
        case SuspensionReason.EXTERNAL:
            what = "completion"
        case SuspensionReason.CHILDREN:
            what = "children"
        case SuspensionReason.AUTHORIZATION:
            what = "consent"
        case _:
            assert_never(wait.reason)
    asked = f" {wait.question!r}" if wait.question else ""
    if wait.outcome == "waiting":
        return f"{what}{asked}: still waiting"
    if wait.outcome == "expired":
        return f"{what}{asked}: expired, nobody answered"
    by = f" by {wait.by}" if wait.by else ""
    said = f": {wait.detail}" if wait.detail else ""
    return f"{what}{asked}: {wait.outcome}{by}{said}"


def _heading(message: Message) -> str:
    if message.role == "assistant":
        return f"assistant (turn {message.turn}, {message.model})"
    if message.role == "tool":
        return f"tool result {message.tool} [{message.tool_call_id}]: {message.status}"
    if message.origin in ("steer", "follow_up"):
        by = f" from {message.by}" if message.by else ""
        return f"user ({message.origin.replace('_', '-')} message{by})"
    if message.origin == "runtime":
        return "user (the runtime's note)"
    if message.origin == "compaction":
        return f"user (the runtime's summary, by {message.model})"
    if message.origin == "tasks":
        return f"system (the task list, from turn {message.turn} on)"
    if message.origin == "context":
        return f"system (per-turn context of turn {message.turn})"
    return message.role


def _not_exact(message: Message) -> str | None:
    if message.truncated:
        return (
            f"(the model was shown this preview of a {message.size}-byte result, with the "
            f"handle {message.result_ref} to read the rest through read_tool_output)"
        )
    if message.origin == "compaction":
        return (
            f"(from turn {message.turn} on, the model saw this summary in place of the "
            f"{message.replaced} messages before turn {message.cut_turn}; the record keeps "
            f"its start, the whole is stored as {message.result_ref})"
        )
    if message.origin == "tasks":
        if not message.content:
            return f"(from turn {message.turn} on, the system prompt held no task list: emptied)"
        return (
            f"(from turn {message.turn} on, the system prompt ended with this task list, "
            "in place of the one before)"
        )
    if message.origin == "context":
        return (
            f"(turn {message.turn}'s system prompt also held these context providers' "
            "blocks, for that call only; their text is stored by reference, not in the "
            "records)"
        )
    if not message.exact:
        return "(its exact wording is the runtime's, not recorded; this says what it said)"
    return None


def _thread_heading(run: str) -> str:
    return f"earlier conversation (thread of {run})"


def _thread_note(run: str, bound: int | None) -> str:
    if bound == 0:
        return (
            f"(the model was shown none of the earlier Run {run}'s conversation: "
            "limits.max_history_records is 0)"
        )
    return (
        f"(here the model was first shown the end of the earlier Run {run}'s conversation, "
        "at most limits.max_history_records messages of it; they are that Run's, not "
        f"recorded here: psych report {run} --transcript)"
    )


def _after_system(transcript: Transcript) -> int:
    """Where the thread's place is among the messages: right after the system prompt."""
    return 1 if transcript.messages and transcript.messages[0].role == "system" else 0


def _summary(transcript: Transcript) -> str:
    why = f" ({transcript.reason})" if transcript.reason else ""
    return (
        f"Transcript of {transcript.workflow_id}: {transcript.kind} {transcript.agent}, "
        f"{transcript.status}{why}"
    )


def transcript_lines(transcript: Transcript, indent: str = "") -> list[tuple[str, str]]:
    """The transcript as (line, style) pairs: the terminal styles them, a pipe gets the
    lines alone."""
    lines: list[tuple[str, str]] = [
        (indent + _summary(transcript), "bold " + STATUS_STYLES.get(transcript.status, ""))
    ]

    def block(text: str, style: str = "") -> None:
        lines.extend((indent + line, style) for line in (text.splitlines() or [""]))

    for index, message in enumerate(transcript.messages):
        if transcript.thread is not None and index == _after_system(transcript):
            lines.append(("", ""))
            lines.append((f"{indent}── {_thread_heading(transcript.thread)} ──", "bold cyan"))
            lines.append((indent + _thread_note(transcript.thread, transcript.thread_bound), "dim"))
        lines.append(("", ""))
        role_style = _ROLE_STYLES.get(message.role, "bold cyan")
        lines.append((f"{indent}── {_heading(message)} ──", role_style))
        for wait in message.waits:
            lines.append((f"{indent}{_wait_text(wait)}", "yellow"))
        note = _not_exact(message)
        if note:
            lines.append((indent + note, "dim"))
        if message.content or not message.tool_calls:
            block(message.content)
        for call in message.tool_calls:
            lines.append(
                (f"{indent}→ {call.get('name')} [{call.get('id')}] {call.get('arguments')}", "cyan")
            )
    for message in transcript.unseen:
        lines.append(("", ""))
        lines.append((f"{indent}── {_heading(message)}, after the last model call ──", "dim"))
        block(message.content, "dim")
    for step in transcript.steps:
        lines.append(("", ""))
        lines.extend(_step_lines(step, indent))
    return lines


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _step_lines(step: StepTranscript, indent: str) -> list[tuple[str, str]]:
    lines = [(f"{indent}── step {step.index} {step.name} ({step.kind}) ──", "bold cyan")]
    lines.append((f"{indent}given {_json(step.input)}", ""))
    if step.ok is None:
        lines.append((f"{indent}running", "cyan"))
    elif step.ok:
        lines.append((f"{indent}-> ok: {_json(step.output)}", "green"))
    else:
        lines.append((f"{indent}-> failed: {step.error}", "red"))
    if step.child is not None:
        lines.extend(transcript_lines(step.child, indent + "    "))
    return lines


def _fence(text: str, language: str = "text") -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


def _md_arguments(arguments: str) -> str:
    try:
        json.loads(arguments)
    except ValueError:
        return _fence(arguments)
    return _fence(arguments, "json")


def transcript_markdown(transcript: Transcript, level: int = 1) -> str:
    """The transcript as a Markdown document (a child Run's nested ``level`` deeper)."""
    head = "#" * level
    sub = "#" * (level + 1)
    why = f" ({transcript.reason})" if transcript.reason else ""
    parts = [
        f"{head} Transcript of `{transcript.workflow_id}`",
        f"{transcript.kind} **{transcript.agent}**, {transcript.status}{why}",
    ]
    for index, message in enumerate(transcript.messages):
        if transcript.thread is not None and index == _after_system(transcript):
            parts.append(f"{sub} {_thread_heading(transcript.thread)}")
            parts.append(f"*{_thread_note(transcript.thread, transcript.thread_bound)}*")
        parts.append(f"{sub} {_heading(message)}")
        parts.extend(f"- {_wait_text(wait)}" for wait in message.waits)
        note = _not_exact(message)
        if note:
            parts.append(f"*{note}*")
        if message.role in ("system", "tool"):
            parts.append(_fence(message.content))
        elif message.content:
            parts.append(message.content)
        for call in message.tool_calls:
            parts.append(f"Tool call `{call.get('name')}` (`{call.get('id')}`):")
            parts.append(_md_arguments(call.get("arguments", "")))
    for message in transcript.unseen:
        parts.append(f"{sub} {_heading(message)}, after the last model call")
        parts.append(message.content)
    for step in transcript.steps:
        parts.append(f"{sub} Step {step.index}: {step.name} ({step.kind})")
        parts.append("Given:")
        parts.append(_fence(_json(step.input), "json"))
        if step.ok is None:
            parts.append("Running.")
        elif step.ok:
            parts.append("Output:")
            parts.append(_fence(_json(step.output), "json"))
        else:
            parts.append(f"Failed: {step.error}")
        if step.child is not None:
            parts.append(transcript_markdown(step.child, level + 2))
    return "\n\n".join(parts) + "\n"


def print_transcript(transcript: Transcript, out: TextIO, *, markdown: bool) -> None:
    """Print a transcript: Markdown text, or lines (styled on a terminal)."""
    if markdown:
        out.write(printable(transcript_markdown(transcript)))
        out.flush()
        return
    console = output_for(out).console
    lines = [(printable(line), style) for line, style in transcript_lines(transcript)]
    if console is None:
        out.write("".join(line + "\n" for line, _ in lines))
        out.flush()
        return
    for line, style in lines:
        console.print(Text(line, style=style), overflow="fold")
