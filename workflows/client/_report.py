"""The report: a typed projection of a Run's records (its types: ``_report_types.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, assert_never

from psych_runtime.specs import Task
from psych_runtime.workflows.client._report_types import (
    McpDiscoveryReport,
    ModelCallReport,
    RunReport,
    StepReport,
    SuspensionReport,
    ToolCallReport,
    WaitOutcome,
)
from psych_runtime.workflows.contract._contract import RunState
from psych_runtime.workflows.contract._records import (
    AbortRequested,
    ChildSettled,
    ChildSpawned,
    CompactionApplied,
    CompactionFailed,
    ComponentShown,
    ContextProvided,
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
    SuspensionReason,
    TasksUpdated,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    TurnStarted,
)


def build_report(
    workflow_id: str,
    state: RunState,
    records: Sequence[Record],
    children: Mapping[str, RunReport] | None = None,
) -> RunReport:
    """Project ``records`` (in seq order) into a RunReport; ``children`` are the reports
    of its steps' child Runs by workflow id."""
    admitted = next((r for r in records if isinstance(r, RunAdmitted)), None)
    model_calls: list[ModelCallReport] = []
    # Keyed by (turn, call id): providers may reuse index-like call ids in later turns.
    tools: list[ToolCallReport] = []  # in the order they started
    unfinished: dict[tuple[int, str], list[tuple[int, datetime]]] = {}
    """(turn, call id) -> where in ``tools`` its started calls wait for their end (and since
    when), first first: a turn may hold two calls under one id (the second refused)."""
    settled: RunSettled | None = None
    open_call: ModelCallStarted | None = None
    steps: dict[str, StepReport] = {}
    started_at: dict[str, Any] = {}
    discoveries: list[McpDiscoveryReport] = []
    peers: list[PeerDiscovered] = []
    peer_cancels: list[PeerTaskCanceled] = []
    compactions: list[CompactionApplied | CompactionFailed] = []
    children_settled: list[ChildSettled] = []
    tasks: tuple[Task, ...] = ()
    task_updates = 0
    components: list[ComponentShown] = []
    context: list[ContextProvided] = []
    waits: list[SuspensionReport] = []
    for record in records:
        match record:
            case StepStarted():
                started_at[record.step] = record.at
                steps[record.step] = StepReport(
                    index=record.index,
                    name=record.step,
                    kind=record.step_kind,
                    input=record.input,
                    run=record.run,
                )
            case StepFinished():
                begun = steps.get(record.step)
                totals = record.totals
                steps[record.step] = StepReport(
                    index=begun.index if begun else len(steps) + 1,
                    name=record.step,
                    kind=record.step_kind,
                    input=begun.input if begun else None,
                    ok=record.ok,
                    output=record.output,
                    error=record.error,
                    run=record.run,
                    status=record.status,
                    usage=totals.usage if totals else None,
                    cost=totals.cost if totals else None,
                    seconds=(record.at - started_at[record.step]).total_seconds()
                    if record.step in started_at
                    else None,
                )
            case ModelCallStarted():
                if open_call is not None:
                    # Only a turn that waited for an MCP server's consent starts an attempt
                    # with none of its results recorded and goes on.
                    model_calls.append(
                        _unanswered(
                            open_call,
                            "no call made: an MCP server's consent was asked first, "
                            "then the call was tried again",
                        )
                    )
                open_call = record
            case ModelCallFinished():
                model_calls.append(
                    ModelCallReport(
                        turn=record.turn,
                        model=record.model,
                        attempt=open_call.attempt if open_call else 1,
                        ok=True,
                        text=record.text,
                        tool_calls=record.tool_calls,
                        usage=record.usage,
                        cost=record.cost,
                        latency=record.latency,
                        context_ref=record.context_ref,
                        system_ref=record.system_ref,
                    )
                )
                open_call = None
            case ModelCallFailed():
                model_calls.append(
                    ModelCallReport(
                        turn=record.turn,
                        model=record.model,
                        attempt=open_call.attempt if open_call else 1,
                        ok=False,
                        error=record.message,
                        transient=record.transient,
                        usage=record.usage,
                        cost=record.cost,
                    )
                )
                open_call = None
            case ToolCallStarted():
                started = unfinished.setdefault((record.turn, record.call_id), [])
                started.append((len(tools), record.at))
                tools.append(
                    ToolCallReport(
                        turn=record.turn,
                        call_id=record.call_id,
                        tool=record.tool,
                        arguments=record.arguments,
                    )
                )
            case ToolCallFinished():
                waiting = unfinished.get((record.turn, record.call_id))
                at, since = waiting.pop(0) if waiting else (None, None)
                report = ToolCallReport(
                    turn=record.turn,
                    call_id=record.call_id,
                    tool=record.tool,
                    arguments=tools[at].arguments if at is not None else "",
                    status=record.status,
                    result=record.content,
                    truncated=record.truncated,
                    size=record.size,
                    result_ref=record.result_ref,
                    latency=record.latency,
                    ran_arguments=record.ran_arguments,
                    hooks=record.hooks,
                    seconds=None if since is None else (record.at - since).total_seconds(),
                )
                if at is None:
                    tools.append(report)
                else:
                    tools[at] = report
                # A wait on child Runs ends with no resume: its call's end says they ended.
                _end_wait(waits, record.call_id, record.at, outcome="children_ended", children=True)
            case McpDiscovered():
                discoveries.append(
                    McpDiscoveryReport(
                        turn=record.turn,
                        server=record.server,
                        status=record.status,
                        tools=record.tools,
                        catalog_hash=record.catalog_hash,
                        cached=record.cached,
                        error=record.error,
                        unmatched=record.unmatched,
                    )
                )
            case PeerDiscovered():
                peers.append(record)
            case PeerTaskCanceled():
                peer_cancels.append(record)
            case CompactionApplied() | CompactionFailed():
                compactions.append(record)
            case ChildSettled():
                children_settled.append(record)
            case TasksUpdated():
                tasks, task_updates = record.tasks, task_updates + 1
            case ComponentShown():
                components.append(record)
            case ContextProvided():
                context.append(record)
                _with_context(model_calls, record)
            case RunSettled():
                settled = record
            case Suspended():
                waits.append(SuspensionReport(pending=record.pending, suspended_at=record.at))
            case Resumed():
                _end_wait(
                    waits,
                    record.id,
                    record.at,
                    outcome=record.outcome,
                    by=record.by,
                    detail=record.detail,
                )
            case SuspensionExpired():
                _end_wait(waits, record.id, record.at, outcome="expired")
            case RunAdmitted():
                pass  # the Run's input, system prompt and thread: ``admitted`` above
            case (
                TurnStarted()
                | ToolWithheld()
                | AbortRequested()
                | SteerReceived()
                | SteerRefused()
                | NextRunStarted()
                | ChildSpawned()
                | RunContinued()
            ):
                # What the Run did is the report's; how it got there (turns, steering, a
                # withheld tool, a spawn, a continue-as-new) is the record stream's to show.
                pass
            case _:
                assert_never(record)
    if open_call is not None:
        # The call was open when the records end: still running, or cut off by how the Run
        # settled (an abort, its deadline, a cancellation) with no result recorded.
        model_calls.append(
            _unanswered(open_call, None)
            if settled is None
            else _unanswered(
                open_call,
                f"no answer: the Run settled {settled.status.value} while the call was open"
                + (f" ({settled.reason})" if settled.reason else ""),
            )
        )
    return RunReport(
        workflow_id=workflow_id,
        run_id=state.run_id,
        tenant=state.tenant,
        agent=state.agent,
        version_hash=state.version_hash,
        input=admitted.messages if admitted else (),
        system_prompt=admitted.system_prompt if admitted else "",
        model_calls=tuple(model_calls),
        tool_calls=tuple(tools),
        suspensions=tuple(waits),
        status=settled.status if settled else state.status,
        reason=settled.reason if settled else state.reason,
        answer=settled.answer if settled else None,
        kind=state.kind,
        steps=tuple(
            step.model_copy(update={"child": (children or {}).get(step.run or "")})
            for step in steps.values()
        ),
        outputs=settled.outputs if settled else state.outputs,
        totals=settled.totals if settled else state.totals,
        mcp=tuple(discoveries),
        peers=tuple(peers),
        peer_cancels=tuple(peer_cancels),
        tasks=tasks,
        task_updates=task_updates,
        components=tuple(components),
        context=tuple(context),
        compactions=tuple(compactions),
        thread=admitted.thread if admitted else None,
        children=tuple(children_settled),
        left_out=admitted.left_out if admitted else (),
        undelivered=settled.undelivered if settled else (),
    )


def _with_context(model_calls: list[ModelCallReport], record: ContextProvided) -> None:
    """Give the answered call of ``record``'s turn (recorded right before it) its blocks."""
    for index in range(len(model_calls) - 1, -1, -1):
        call = model_calls[index]
        if call.turn == record.turn and call.ok:
            blocks = tuple(shown.ref for shown in record.shown)
            model_calls[index] = call.model_copy(update={"context_blocks": blocks})
            return


def _unanswered(started: ModelCallStarted, error: str | None) -> ModelCallReport:
    """An attempt with no result recorded: open (``error`` None) or ended without one."""
    return ModelCallReport(
        turn=started.turn,
        model=started.model,
        attempt=started.attempt,
        ok=None if error is None else False,
        error=error,
    )


def _end_wait(
    waits: list[SuspensionReport],
    pending_id: str,
    at: datetime,
    *,
    outcome: WaitOutcome,
    by: str | None = None,
    detail: str | None = None,
    children: bool = False,
) -> None:
    """Close the latest open wait on ``pending_id`` with how and when it ended (``children``:
    the latest open wait on child Runs of the call ``pending_id``)."""
    for index in range(len(waits) - 1, -1, -1):
        wait = waits[index]
        pending = wait.pending
        if wait.ended_at is not None:
            continue
        if (
            pending.call_id == pending_id and pending.reason is SuspensionReason.CHILDREN
            if children
            else pending.id == pending_id
        ):
            waits[index] = wait.model_copy(
                update={
                    "outcome": outcome,
                    "by": by,
                    "detail": detail,
                    "ended_at": at,
                    "seconds": (at - wait.suspended_at).total_seconds(),
                }
            )
            return
