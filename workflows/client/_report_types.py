"""The report's types: what ``build_report`` (``_report.py``) projects a Run's records into."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from psych_runtime.activities.contract import ChatMessage, HookEffect, Latency, ThreadRef, Usage
from psych_runtime.specs import LeftOut, Task
from psych_runtime.workflows.contract._records import (
    ChildSettled,
    CompactionApplied,
    CompactionFailed,
    ComponentShown,
    ContextProvided,
    PeerDiscovered,
    PeerTaskCanceled,
    Pending,
    RunStatus,
    StepKind,
    ToolCallStatus,
    Totals,
    Undelivered,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelCallReport(_Frozen):
    """One model-call attempt."""

    turn: int
    model: str
    attempt: int
    ok: bool | None
    """None while the call is open; False when it failed, or ended with no answer (``error``
    says why: the Run settled while it ran, such as an abort or the deadline)."""
    text: str | None = None
    tool_calls: tuple[dict[str, str], ...] = ()
    usage: Usage | None = None
    """The answer's tokens; a failed attempt's when its answer came (billed) before it
    failed, as the Run's totals count them; None: no answer came."""
    cost: float | None = None
    """None when the price is unknown (never 0 for unknown), or no answer came."""
    latency: Latency | None = None
    error: str | None = None
    transient: bool | None = None
    context_ref: str | None = None
    """What the call was sent, by reference: the stored conversation after it, its input
    messages then its answer (``Conversations.messages``). None: no answer recorded (a
    failed or open attempt), or a worker of an earlier build recorded the call."""
    system_ref: str | None = None
    """The stored system prompt the call was sent, before ``context_blocks`` (None: none,
    or not recorded, as ``context_ref``)."""
    context_blocks: tuple[str, ...] = ()
    """The stored per-turn context blocks the call's system prompt ended with, in order
    (``ContextProvided``)."""
    system_prompt: str | None = None
    """The system prompt as sent ("": none), read from the blob store; None unless the
    report was asked for the call's inputs (``PsychClient.report(..., inputs=...)``)."""
    messages: tuple[ChatMessage, ...] | None = None
    """The messages the call was sent after its system prompt, oldest first, read from the
    blob store; None unless asked, as ``system_prompt``."""


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
    ran_arguments: dict[str, Any] | None = None
    """The arguments that ran when a pre hook rewrote ``arguments`` (None: those)."""
    hooks: tuple[HookEffect, ...] = ()
    """What each tool-call hook did to the call."""
    seconds: float | None = None
    """From its start to its result, waits included: every call's, a built-in's too."""


WaitOutcome = Literal[
    "approved", "rejected", "answered", "completed", "authorized", "expired", "children_ended"
]
"""How a wait ended: a resume's outcome, its expiry, or (a wait on child Runs) the children
it waited for ended."""


class SuspensionReport(_Frozen):
    """One wait of the Run: what it waited for, and how and when the wait ended."""

    pending: Pending
    suspended_at: datetime
    outcome: WaitOutcome | None = None
    """None while the Run waits, or when it settled otherwise (an abort, its deadline: its
    status says how)."""
    by: str | None = None
    """Who resumed the Run."""
    detail: str | None = None
    """The note, the answer, or the completion payload (as JSON text)."""
    ended_at: datetime | None = None
    seconds: float | None = None
    """From the suspension to its answer or expiry."""


class McpDiscoveryReport(_Frozen):
    """What one MCP server offered at one turn boundary."""

    turn: int
    server: str
    status: Literal["ok", "deferred", "unavailable"]
    tools: int
    catalog_hash: str | None = None
    cached: bool = False
    error: str | None = None
    unmatched: tuple[str, ...] = ()
    """``allow`` entries naming none of the server's tools (they grant nothing)."""


class StepReport(_Frozen):
    """One workflow step: what it was given, what it gave, and its child Run's report."""

    index: int
    name: str
    kind: StepKind
    input: Any = None
    """The tool's arguments, or the child Run's input messages."""
    ok: bool | None = None
    """None while the step runs."""
    output: Any = None
    error: str | None = None
    run: str | None = None
    """The child Run's workflow id (agent and workflow steps)."""
    status: RunStatus | None = None
    usage: Usage | None = None
    cost: float | None = None
    """None when unknown (never 0 for unknown)."""
    seconds: float | None = None
    """From the step's start to its end."""
    child: RunReport | None = None
    """The child Run's own report: its model and tool calls (and steps)."""


class RunReport(_Frozen):
    """Everything a Run did, projected from its records."""

    workflow_id: str
    run_id: str
    tenant: str
    agent: str
    version_hash: str
    input: tuple[str, ...]
    system_prompt: str
    """The Run's own system prompt as it was admitted (``run_admitted``). A call may have
    been sent another (a task list, per-turn context, a continued Run's): each call's as
    sent is its ``ModelCallReport.system_prompt``, read when asked (``inputs``)."""
    model_calls: tuple[ModelCallReport, ...]
    tool_calls: tuple[ToolCallReport, ...]
    status: RunStatus
    reason: str | None
    answer: str | None
    totals: Totals | None
    """As it settled, or so far while it runs or waits (a workflow's: its ended steps' too)."""
    kind: Literal["agent", "workflow"] = "agent"
    steps: tuple[StepReport, ...] = ()
    """A workflow's steps in order (empty for an agent)."""
    outputs: dict[str, Any] | None = None
    """A workflow's step outputs keyed by step name."""
    suspensions: tuple[SuspensionReport, ...] = ()
    """Each time the Run waited (approval, question, external completion, consent, child
    Runs), in order, with its resume or expiry. A workflow step's or subagent's own waits
    are in that child Run's report."""
    mcp: tuple[McpDiscoveryReport, ...] = ()
    """Each MCP server's catalogue at each turn boundary (empty without MCP servers)."""
    peers: tuple[PeerDiscovered, ...] = ()
    """What each A2A peer offered at each turn boundary (its card, narrowed), in order."""
    peer_cancels: tuple[PeerTaskCanceled, ...] = ()
    """Peer tasks the Run asked to cancel when it settled while waiting on them."""
    tasks: tuple[Task, ...] = ()
    """The task list as the Run last set it (``update_tasks``)."""
    task_updates: int = 0
    components: tuple[ComponentShown, ...] = ()
    """Every component shown (``show_component``), in order."""
    context: tuple[ContextProvided, ...] = ()
    """Each model call's per-turn context: blocks shown by reference, providers skipped."""
    compactions: tuple[CompactionApplied | CompactionFailed, ...] = ()
    """Each summariser call, in order, with its usage and cost (a failed one's when its
    answer came, billed, before it failed), which ``totals`` count."""
    thread: ThreadRef | None = None
    """The earlier Run this Run continues."""
    children: tuple[ChildSettled, ...] = ()
    """Each delegated or spawned child Run, in the order they ended."""
    left_out: tuple[LeftOut, ...] = ()
    """A subagent's tools, MCP servers and A2A peers its parent did not grant, each with
    why."""
    undelivered: tuple[Undelivered, ...] = ()
    """Steer and follow-up messages the Run took and no model answered: it settled first
    (``RunSettled.undelivered``). Send them again, as a next Run's input for instance."""
