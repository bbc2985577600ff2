"""The report: a typed projection of a Run's records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from psych_runtime.activities._payloads import Latency, Usage
from psych_runtime.workflows._records import (
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    RunAdmitted,
    RunSettled,
    RunState,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallStatus,
    Totals,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelCallReport(_Frozen):
    """One model-call attempt."""

    turn: int
    model: str
    attempt: int
    ok: bool
    text: str | None = None
    tool_calls: tuple[dict[str, str], ...] = ()
    usage: Usage | None = None
    cost: float | None = None
    """None when the price is unknown (never 0 for unknown)."""
    latency: Latency | None = None
    error: str | None = None
    transient: bool | None = None


class ToolCallReport(_Frozen):
    """One tool call, from the model's request to its result."""

    turn: int
    call_id: str
    tool: str
    arguments: str
    status: ToolCallStatus | None = None
    """None while the call is open."""
    result: str | None = None
    """As the model was shown it (a preview when ``truncated``)."""
    truncated: bool = False
    size: int = 0
    result_ref: str | None = None
    latency: Latency | None = None


class RunReport(_Frozen):
    """Everything a Run did, projected from its records."""

    workflow_id: str
    run_id: str
    tenant: str
    agent: str
    version_hash: str
    input: tuple[str, ...]
    system_prompt: str
    model_calls: tuple[ModelCallReport, ...]
    tool_calls: tuple[ToolCallReport, ...]
    status: RunStatus
    reason: str | None
    answer: str | None
    totals: Totals | None
    """Set once the Run has settled."""


def build_report(workflow_id: str, state: RunState, records: Sequence[Any]) -> RunReport:
    """Project ``records`` (in seq order) into a RunReport."""
    admitted = next((r for r in records if isinstance(r, RunAdmitted)), None)
    model_calls: list[ModelCallReport] = []
    # Keyed by (turn, call id): providers may reuse index-like call ids in later turns.
    tools: dict[tuple[int, str], ToolCallReport] = {}
    settled: RunSettled | None = None
    open_call: ModelCallStarted | None = None
    for record in records:
        if isinstance(record, ModelCallStarted):
            open_call = record
        elif isinstance(record, ModelCallFinished):
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
                )
            )
            open_call = None
        elif isinstance(record, ModelCallFailed):
            model_calls.append(
                ModelCallReport(
                    turn=record.turn,
                    model=record.model,
                    attempt=open_call.attempt if open_call else 1,
                    ok=False,
                    error=record.message,
                    transient=record.transient,
                )
            )
            open_call = None
        elif isinstance(record, ToolCallStarted):
            tools[record.turn, record.call_id] = ToolCallReport(
                turn=record.turn,
                call_id=record.call_id,
                tool=record.tool,
                arguments=record.arguments,
            )
        elif isinstance(record, ToolCallFinished):
            started = tools.get((record.turn, record.call_id))
            tools[record.turn, record.call_id] = ToolCallReport(
                turn=record.turn,
                call_id=record.call_id,
                tool=record.tool,
                arguments=started.arguments if started else "",
                status=record.status,
                result=record.content,
                truncated=record.truncated,
                size=record.size,
                result_ref=record.result_ref,
                latency=record.latency,
            )
        elif isinstance(record, RunSettled):
            settled = record
    return RunReport(
        workflow_id=workflow_id,
        run_id=state.run_id,
        tenant=state.tenant,
        agent=state.agent,
        version_hash=state.version_hash,
        input=admitted.messages if admitted else (),
        system_prompt=admitted.system_prompt if admitted else "",
        model_calls=tuple(model_calls),
        tool_calls=tuple(tools.values()),
        status=settled.status if settled else RunStatus.RUNNING,
        reason=settled.reason if settled else None,
        answer=settled.answer if settled else None,
        totals=settled.totals if settled else None,
    )
