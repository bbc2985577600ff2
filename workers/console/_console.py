"""Printing Runs for people: one line per record, and a report summary.

``psych run``, ``psych follow`` and ``examples/demo.py`` all print through ``follow_run``,
so what the demo shows is exactly what the commands show. The text here is what a pipe
gets; on a terminal the same lines are styled (``_render``) under a live status line
(``_live``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TextIO, assert_never

from psych_runtime.specs import printable
from psych_runtime.workers.console._display import display_fields, format_display_record, state_rows
from psych_runtime.workers.console._render import field_grid, output_for
from psych_runtime.workers.console._report_children import child_fields, child_settled_line
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
    Pending,
    Record,
    Resumed,
    RunAdmitted,
    RunContinued,
    RunReport,
    RunSettled,
    RunState,
    SteerReceived,
    SteerRefused,
    StepFinished,
    StepStarted,
    Suspended,
    SuspensionExpired,
    SuspensionReason,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    Totals,
    TurnStarted,
)


def _short(text: str, limit: int = 100) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _clip(text: str, limit: int, full: bool) -> str:
    """``text`` whole when ``full``, else shortened to one line."""
    return text if full else _short(text, limit)


def _whole(head: str, text: str) -> str:
    """``head`` then ``text`` whole: on the same line, or indented below when it has several."""
    if "\n" not in text:
        return f"{head} {text}"
    return head + "\n" + "\n".join("      " + line for line in text.splitlines())


def _ms(value: float) -> str:
    return f"{value:.0f} ms"


def format_time(value: datetime) -> str:
    """A timestamp to the second, ISO 8601 with its offset."""
    return value.isoformat(timespec="seconds")


def format_until(expires_at: datetime, now: datetime) -> str:
    """How long from ``now`` until ``expires_at``: ``in 23 h 59 min``, ``2 min ago``."""
    seconds = int((expires_at - now).total_seconds())
    left = abs(seconds)
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        span = f"{days} d {hours} h"
    elif hours:
        span = f"{hours} h {minutes} min"
    elif minutes:
        span = f"{minutes} min {secs} s"
    else:
        span = f"{secs} s"
    return f"in {span}" if seconds >= 0 else f"{span} ago"


def describe_pending(item: Pending) -> str:
    """What a pending item waits for, as a phrase after "waiting for"."""
    match item.reason:
        case SuspensionReason.APPROVAL:
            return f"approval of {item.tool}({_short(item.arguments, 80)})"
        case SuspensionReason.QUESTION:
            return f"an answer to {_short(item.question or '', 80)!r}"
        case SuspensionReason.EXTERNAL:
            said = f": {_short(item.question, 80)}" if item.question else ""
            return f"completion of {item.tool}({_short(item.arguments, 60)}){said}"
        case SuspensionReason.CHILDREN if item.question:
            # wait_children: the spawned children it waits for
            return f"spawned children {_short(item.question, 120)}"
        case SuspensionReason.AUTHORIZATION:
            # The whole URL: a shortened one cannot be opened.
            return f"a person's consent for MCP server {item.tool}: open {item.question}"
        case SuspensionReason.CHILDREN:
            return f"subagent Run {item.id}"
        case _:
            assert_never(item.reason)


def resume_command(workflow_id: str, item: Pending, tenant: str) -> str | None:
    """The ``psych`` command that resumes ``item`` (None for child Runs, which finish)."""
    flag = "" if tenant == "default" else f" --tenant {tenant}"
    if item.run is not None:  # a child's item: named by its holder, in case its id repeats
        flag += f" --held-by {item.run}"
    ident = _shell_word(item.id)
    match item.reason:
        case SuspensionReason.APPROVAL:
            return f"psych approve {workflow_id} {ident}{flag} (or: psych deny ... --note TEXT)"
        case SuspensionReason.QUESTION:
            return f"psych answer {workflow_id} {ident} TEXT{flag}"
        case SuspensionReason.EXTERNAL:
            return f"psych complete {workflow_id} {ident} --payload JSON{flag}"
        case SuspensionReason.CHILDREN:
            return None
        case SuspensionReason.AUTHORIZATION:
            return (
                f"open {item.question} in a browser and consent; the OAuth callback "
                "(psych oauth-callback, or psych serve's /oauth/callback) resumes the Run"
            )
        case _:
            assert_never(item.reason)


def _shell_word(text: str) -> str:
    if text and all(c.isalnum() or c in "-_.:/@+=" for c in text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def _pending_id(item: Pending) -> str:
    match item.reason:
        case SuspensionReason.EXTERNAL:
            return f"token {item.id}"
        case SuspensionReason.CHILDREN:
            return f"call {item.call_id}"
        case SuspensionReason.APPROVAL | SuspensionReason.QUESTION | SuspensionReason.AUTHORIZATION:
            return f"id {item.id}"
        case _:
            assert_never(item.reason)


def _hooked(record: ToolCallFinished) -> str:
    """`` (hooks: pre acme:check rewrote_arguments; ran with {...})``, or nothing."""
    if not record.hooks:
        return ""
    effects = "; ".join(f"{h.stage} {h.hook} {h.effect}" for h in record.hooks)
    ran = ""
    if record.ran_arguments is not None:
        ran = f"; ran with {_short(json.dumps(record.ran_arguments, ensure_ascii=False), 80)}"
    return f" (hooks: {effects}{ran})"


def format_record(record: Record, *, full: bool = False) -> str:
    """One readable progress line for a Record (``Record`` union member), ``printable``.

    Args:
        record: the record.
        full: show model text, tool arguments and tool results whole (on the lines below
            when they have several), instead of shortened to one line.
    """
    return printable(_record_line(record, full))


def _billed(record: ModelCallFailed | CompactionFailed) -> str:
    """What a failed call's answer billed, when one came before it failed (else "")."""
    usage = record.usage
    if usage is None:
        return ""
    return f" [billed {usage.input_tokens} in / {usage.output_tokens} out tokens]"


def _record_line(record: Record, full: bool) -> str:
    match record:
        case RunAdmitted():
            said = _short(" / ".join(record.messages), 80)
            thread = f", continuing {record.thread.run}" if record.thread else ""
            return (
                f"run admitted: {record.spec_kind} {record.agent} ({record.version_hash[:19]}), "
                f"input {said!r}{thread}"
            )
        case TurnStarted():
            return f"turn {record.turn}"
        case ModelCallStarted():
            attempt = f" (attempt {record.attempt})" if record.attempt > 1 else ""
            return f"  model call {record.model}{attempt} ..."
        case ModelCallFinished():
            if record.tool_calls:
                names = ", ".join(call.get("name", "?") for call in record.tool_calls)
                said = f"{len(record.tool_calls)} tool call(s): {names}"
            else:
                said = "text" if full else f"text {_short(record.text, 80)!r}"
            usage = record.usage
            line = (
                f"  model call {record.model} -> {said} "
                f"[{usage.input_tokens} in / {usage.output_tokens} out tokens, "
                f"{_ms(record.latency.duration_ms)}]"
            )
            if not full or not record.text:
                return line
            return line + "\n" + "\n".join("      " + part for part in record.text.splitlines())
        case ModelCallFailed():
            kind = "transient" if record.transient else "permanent"
            status = f", HTTP {record.status}" if record.status is not None else ""
            retry = (
                f", retry after {record.retry_after:g} s" if record.retry_after is not None else ""
            )
            left = f"; {record.budget_left} retries left" if record.transient else ""
            said = _short(record.message)
            return (
                f"  model call {record.model} failed ({kind}{status}{retry}): {said}{left}"
                + _billed(record)
            )
        case ToolCallStarted():
            return f"  tool call {record.tool}({_clip(record.arguments, 80, full)}) ..."
        case ToolCallFinished():
            took = f" [{_ms(record.latency.duration_ms)}]" if record.latency else ""
            took += _hooked(record)
            if full:
                return _whole(
                    f"  tool call {record.tool} -> {record.status}{took}:", record.content
                )
            return f"  tool call {record.tool} -> {record.status}: {_short(record.content)}{took}"
        case McpDiscovered():
            if record.status == "unavailable":
                return f"  MCP {record.server}: unavailable: {_short(record.error or '', 100)}"
            source = "cached" if record.cached else "fresh"
            deferred = ", deferred (search_mcp_tools)" if record.status == "deferred" else ""
            return f"  MCP {record.server}: {record.tools} tools ({source}){deferred}"
        case PeerDiscovered():
            if record.status == "unavailable":
                return f"  A2A peer {record.peer}: unavailable: {_short(record.error or '', 100)}"
            source = "cached" if record.cached else "fresh"
            return f"  A2A peer {record.peer}: {len(record.skills)} skills ({source})"
        case PeerTaskCanceled():
            said = record.state or f"not canceled: {_short(record.error or '', 100)}"
            return f"  A2A peer {record.peer}: asked to cancel task {record.task_id}: {said}"
        case ToolWithheld():
            return f"  tool {record.tool} withheld after {record.failures} failures in a row"
        case Suspended():
            item = record.pending
            return (
                f"  suspended: waiting for {describe_pending(item)} "
                f"until {format_time(item.expires_at)} ({_pending_id(item)})"
            )
        case Resumed():
            by = f" by {record.by}" if record.by else ""
            detail = f": {_short(record.detail, 80)}" if record.detail else ""
            return f"  resumed: {record.outcome}{by} ({record.reason} {record.id}){detail}"
        case SuspensionExpired():
            return f"  suspension expired: nobody answered {record.reason} {record.id} in time"
        case AbortRequested():
            by = f" by {record.by}" if record.by else ""
            return f"abort requested{by}: {_short(record.reason, 80)}"
        case SteerReceived():
            by = f" from {record.by}" if record.by else ""
            return f"  {record.mode} message{by}: {_short(record.message, 80)!r}"
        case SteerRefused():
            by = f" from {record.by}" if record.by else ""
            return (
                f"  {record.mode} message{by} not taken ({record.refusal}: "
                f"{_short(record.reason, 120)}): {_short(record.message, 80)!r}"
            )
        case NextRunStarted():
            return f"next Run started: {record.workflow_id} with {_short(record.message, 60)!r}"
        case ChildSpawned():
            tools = ", ".join(record.tools) or "no tools"
            return (
                f"  spawned {record.agent} as {record.run} ({record.model}; {tools}), "
                f"Version {record.version_hash}"
            )
        case StepStarted():
            child = f" as {record.run}" if record.run else ""
            given = _short(json.dumps(record.input, ensure_ascii=False), 80)
            return f"step {record.index} {record.step} ({record.step_kind}){child}, given {given}"
        case StepFinished():
            if record.ok:
                said = _short(json.dumps(record.output, ensure_ascii=False), 80)
                return f"step {record.step} -> ok: {said}"
            return f"step {record.step} -> failed: {_short(record.error or '', 100)}"
        case CompactionApplied():
            return (
                f"  compacted before turn {record.cut_turn} with {record.model}: "
                f"{record.messages_replaced} messages summarised "
                f"[{record.usage.input_tokens} in / {record.usage.output_tokens} out tokens, "
                f"{_ms(record.latency.duration_ms)}]: {_short(record.summary_preview, 80)!r}"
            )
        case CompactionFailed():
            failed = f"  compaction with {record.model} failed: {_short(record.error, 100)}"
            return failed + _billed(record)
        case ChildSettled():
            return child_settled_line(record)
        case RunSettled():
            return f"settled {record.status}: {record.reason}"
        case Displayed():
            return format_display_record(record)
        case RunContinued():
            # Nothing to say but that it happened: the execution before it ended here.
            return f"  {record.kind}"
        case _:
            assert_never(record)


def _field(name: str, value: object) -> str:
    text = str(value).replace("\n", "\n" + " " * 14)
    if not name:  # a continuation of the field above
        return " " * 14 + text
    return f"{name + ':':<13} {text}"


def _totals_fields(
    totals: Totals | None, kind: str = "agent", *, settled: bool = True
) -> list[tuple[str, str]]:
    if totals is None:
        return [("totals", "not settled yet")]
    so_far = [] if settled else [("totals", "so far: the Run has not settled")]
    usage = totals.usage
    counts = (
        [("turns", str(totals.turns))]
        if kind == "agent"
        else [
            (
                "in all",
                f"{totals.model_calls} model calls, {totals.tool_calls} tool calls "
                "(its steps' Runs included)",
            )
        ]
    )
    return [
        *so_far,
        *counts,
        (
            "usage",
            f"{usage.input_tokens} input, {usage.output_tokens} output, "
            f"{usage.cache_read_tokens} cache read, {usage.cache_write_tokens} cache write, "
            f"{usage.reasoning_tokens} reasoning tokens",
        ),
        ("cost", "unknown" if totals.cost is None else f"{totals.cost:.6f}"),
    ]


def _step_fields(report: RunReport) -> list[tuple[str, str]]:
    fields = []
    for step in report.steps:
        state = "running" if step.ok is None else ("ok" if step.ok else "failed")
        took = f", {step.seconds:.2f} s" if step.seconds is not None else ""
        cost = ""
        if step.usage is not None:
            priced = "cost unknown" if step.cost is None else f"cost {step.cost:.6f}"
            cost = f", {step.usage.input_tokens} in / {step.usage.output_tokens} out, {priced}"
        said = step.error if step.ok is False else json.dumps(step.output, ensure_ascii=False)
        fields.append(
            (
                f"step {step.index}",
                f"{step.name} ({step.kind}) {state}{took}{cost}: {_short(said or '', 80)}",
            )
        )
        child = step.child
        if child is not None:
            failed = sum(1 for call in child.model_calls if call.ok is False)
            fields.append(
                (
                    "",
                    f"{child.workflow_id}: {len(child.model_calls)} model calls "
                    f"({failed} failed), {len(child.tool_calls)} tool calls, "
                    f"{len(child.steps)} steps",
                )
            )
    return fields


def _suspension_fields(report: RunReport) -> list[tuple[str, str]]:
    fields = []
    for wait in report.suspensions:
        held = f" (held by {wait.pending.run})" if wait.pending.run else ""
        if wait.outcome is not None:
            by = f" by {wait.by}" if wait.by else ""
            how = f"{wait.outcome.replace('_', ' ')}{by} after {wait.seconds or 0.0:.2f} s"
        elif report.status.terminal:
            how = "unanswered when the Run settled"
        else:
            how = "waiting"
        fields.append(("waited", f"{describe_pending(wait.pending)}{held}: {how}"))
    return fields


def report_fields(report: RunReport) -> list[tuple[str, str]]:
    """A report's summary as (name, value) rows: status, reason, answer, counts, usage,
    cost (a name of "" continues the row above); each value ``printable``."""
    return [(name, printable(value)) for name, value in _report_rows(report)]


def _report_rows(report: RunReport) -> list[tuple[str, str]]:
    failed = sum(1 for call in report.model_calls if call.ok is False)
    by_status: dict[str, int] = {}
    for call in report.tool_calls:
        key = call.status or "open"
        by_status[key] = by_status.get(key, 0) + 1
    counts = ", ".join(f"{count} {status}" for status, count in sorted(by_status.items()))
    if report.kind == "agent" and report.answer:
        answer = ("answer", report.answer)
    elif report.kind != "agent" and report.outputs:
        answer = ("outputs", json.dumps(report.outputs, ensure_ascii=False, indent=2))
    else:
        answer = ("answer", "-")
    return [
        ("run", report.workflow_id),
        (report.kind, f"{report.agent} ({report.version_hash})"),
        ("status", str(report.status)),
        ("reason", report.reason or "-"),
        answer,
        *_step_fields(report),
        *child_fields(report),
        *_suspension_fields(report),
        *(("undelivered", f"{u.mode}: {_short(u.message, 100)}") for u in report.undelivered),
        ("model calls", f"{len(report.model_calls)} ({failed} failed)"),
        ("tool calls", f"{len(report.tool_calls)}" + (f" ({counts})" if counts else "")),
        *display_fields(report),
        *_totals_fields(report.totals, report.kind, settled=report.status.terminal),
    ]


def format_report(report: RunReport) -> str:
    """The summary of a report: status, reason, answer, counts, usage and cost."""
    return "\n".join(_field(name, value) for name, value in report_fields(report))


def print_report(report: RunReport, out: TextIO) -> None:
    """Print a report's summary: a grid that fits a terminal, or the plain text."""
    console = output_for(out).console
    if console is None:
        print(format_report(report), file=out, flush=True)
    else:
        console.print(field_grid(report_fields(report), status=report.status))


def format_state(workflow_id: str, state: RunState) -> str:
    """The answer of the state query, for ``psych status`` (``printable``)."""
    return printable(_state_text(workflow_id, state))


def _state_text(workflow_id: str, state: RunState) -> str:
    lines = [
        _field("run", workflow_id),
        _field(state.kind, f"{state.agent} ({state.version_hash})"),
        _field("status", state.status),
        _field("reason", state.reason or "-"),
        # A workflow has no answer: its result is its steps' outputs, as in the report.
        _field("answer", state.answer or "-")
        if state.kind == "agent"
        else _field(
            "outputs",
            json.dumps(state.outputs, ensure_ascii=False, indent=2) if state.outputs else "-",
        ),
        _field("turn", state.turn) if state.kind == "agent" else _field("step", state.step or "-"),
        _field("records", state.last_seq),
        _field("model calls", state.totals.model_calls),
        _field("tool calls", state.totals.tool_calls),
    ]
    if state.withheld_tools:
        lines.append(_field("withheld", ", ".join(state.withheld_tools)))
    if state.withdrawn_tools:
        # Not the failure streak's: the tenant's permits refuse them (RunState).
        lines.append(_field("withdrawn", ", ".join(state.withdrawn_tools)))
    lines += [_field(name, value) for name, value in state_rows(state)]
    for item in state.pending:
        held = f", held by {item.run}" if item.run else ""
        lines.append(
            _field(
                "waiting for",
                f"{describe_pending(item)} until {format_time(item.expires_at)} "
                f"({_pending_id(item)}{held})",
            )
        )
    return "\n".join(lines)
