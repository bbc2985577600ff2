"""The log's vocabulary: the Records (the status, pending items and totals they carry are
``_status.py``'s, re-exported here).

A Run's log is a list of Records with a gapless ``seq`` starting at 1, each stamped with the
Run's Scope (``_record_log.py`` appends them). The state query, the record stream and the
report are projections of it. Every type here is a frozen pydantic model and travels as
plain JSON, so the plain ``temporal`` CLI can read Runs. The names, inputs and answers of
the workflow contract are in ``_contract.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from psych_runtime.activities.contract import (
    ContextShown,
    ContextSkipped,
    ContextTurn,
    HookEffect,
    Latency,
    ThreadRef,
    Usage,
)
from psych_runtime.specs import Component, LeftOut, Scope, Task
from psych_runtime.workflows.contract._status import CallSuspensionReason as CallSuspensionReason
from psych_runtime.workflows.contract._status import Pending as Pending
from psych_runtime.workflows.contract._status import RunStatus as RunStatus
from psych_runtime.workflows.contract._status import SuspensionReason as SuspensionReason
from psych_runtime.workflows.contract._status import Totals as Totals
from psych_runtime.workflows.contract._status import _Billed, _Sparse


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- records ------------------------------------------------------------------------------


class _Record(_Frozen):
    seq: int
    at: datetime
    scope: Scope


class RunAdmitted(_Record, _Sparse):
    """The Run started: which Version, which input, which system prompt."""

    kind: Literal["run_admitted"] = "run_admitted"
    version_hash: str
    agent: str
    """The Spec's name (an agent's or a workflow's)."""
    messages: tuple[str, ...]
    system_prompt: str
    """As sent to the model (empty for a workflow)."""
    spec_kind: Literal["agent", "workflow"] = "agent"
    thread: ThreadRef | None = None
    """The earlier Run this Run continues, and the conversation head read from it."""
    thread_bound: int | None = None
    """The most thread messages shown (``max_history_records``; 0: none); None: no thread,
    and left out of the JSON (``_Sparse``)."""
    _sparse: ClassVar[tuple[str, ...]] = ("thread_bound",)
    left_out: tuple[LeftOut, ...] = ()
    """A subagent's tools and MCP servers its parent did not grant, each with why."""


class TurnStarted(_Record):
    kind: Literal["turn_started"] = "turn_started"
    turn: int


class ModelCallStarted(_Record):
    kind: Literal["model_call_started"] = "model_call_started"
    turn: int
    model: str
    attempt: int


class ModelCallFinished(_Record, _Sparse):
    kind: Literal["model_call_finished"] = "model_call_finished"
    turn: int
    model: str
    text: str
    tool_calls: tuple[dict[str, str], ...] = ()
    """``{"id", "name", "arguments"}`` as the model sent them."""
    finish_reason: str | None = None
    usage: Usage
    cost: float | None = None
    latency: Latency
    context_ref: str | None = None
    """The stored conversation after the call (``ModelCallResult.context_ref``): the
    messages it was sent, then its answer. None: a worker of an earlier build recorded the
    call (left out of the JSON then, ``_Sparse``, as is ``system_ref``)."""
    system_ref: str | None = None
    """The stored system prompt the call was sent, before its per-turn context blocks
    (``ContextProvided``); None: none, or an earlier build recorded the call."""
    _sparse: ClassVar[tuple[str, ...]] = ("context_ref", "system_ref")


class ModelCallFailed(_Record, _Billed):
    kind: Literal["model_call_failed"] = "model_call_failed"
    turn: int
    model: str
    transient: bool
    status: int | None = None
    retry_after: float | None = None
    message: str
    budget_left: int


ToolCallStatus = Literal["ok", "error", "unknown", "refused", "denied", "rejected", "aborted"]


class ToolCallStarted(_Record):
    kind: Literal["tool_call_started"] = "tool_call_started"
    turn: int
    call_id: str
    tool: str
    arguments: str
    """The arguments exactly as the model sent them."""


class ToolCallFinished(_Record):
    kind: Literal["tool_call_finished"] = "tool_call_finished"
    turn: int
    call_id: str
    tool: str
    status: ToolCallStatus
    """ok, error (the tool failed or the call was invalid), unknown (the worker running a call
    not safe to repeat stopped mid-call), refused (a guard withheld it), denied (the Policy
    said no), rejected (an approver said no), aborted (cancelled by an abort)."""
    content: str
    """The result as the model was shown it (a preview when ``truncated``)."""
    truncated: bool = False
    size: int = 0
    result_ref: str | None = None
    latency: Latency | None = None
    ran_arguments: dict[str, Any] | None = None
    """What the tool ran with, when a pre hook rewrote the model's arguments (else None)."""
    hooks: tuple[HookEffect, ...] = ()
    """Each tool-call hook that denied, rewrote or failed, in the order they ran."""
    handles: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    """Blobs stored beside the result that it names as handles (``ToolOutcome.handles``)."""


class ToolWithheld(_Record):
    """A tool failed ``failure_streak_threshold`` times in a row and is no longer offered."""

    kind: Literal["tool_withheld"] = "tool_withheld"
    tool: str
    failures: int


class McpDiscovered(_Record):
    """What one MCP server offered at a turn boundary (or before a workflow's tool step)."""

    kind: Literal["mcp_discovered"] = "mcp_discovered"
    turn: int
    server: str
    status: Literal["ok", "deferred", "unavailable"]
    """``deferred``: only tools found through ``search_mcp_tools`` are offered."""
    tools: int = 0
    """Tools offered this turn, after ``allow``."""
    catalog_hash: str | None = None
    cached: bool = False
    """True when the worker's cache answered, False when the server was asked."""
    error: str | None = None
    renamed: tuple[tuple[str, str, str], ...] = ()
    """``(model name, server, tool)`` for names that were sanitised, cut or suffixed."""
    unmatched: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    """The ``allow`` entries naming none of the server's tools; left out when empty."""


class PeerDiscovered(_Record):
    """What one A2A peer offered at an agent's turn boundary (from its Agent Card)."""

    kind: Literal["peer_discovered"] = "peer_discovered"
    turn: int
    peer: str
    status: Literal["ok", "unavailable"]
    skills: tuple[str, ...] = ()
    """The peer's own ids of the skills offered this turn, after ``allow``."""
    card_hash: str | None = None
    cached: bool = False
    """True when the worker's cache answered, False when the peer's card was fetched."""
    error: str | None = None


class PeerTaskCanceled(_Record):
    """The Run settled while it waited on an A2A peer's task, and asked the peer to cancel
    it (``CancelTask``, best effort): what the peer answered, or why it could not."""

    kind: Literal["peer_task_canceled"] = "peer_task_canceled"
    peer: str
    task_id: str
    call_id: str
    """The tool call that started the task."""
    state: str | None = None
    """The task's state the peer reported (``canceled``, or the state it had ended in)."""
    error: str | None = None


class Suspended(_Record):
    """The Run waits for something (an approval, an answer, an external completion)."""

    kind: Literal["suspended"] = "suspended"
    pending: Pending


class Resumed(_Record):
    """A pending item was answered."""

    kind: Literal["resumed"] = "resumed"
    reason: SuspensionReason
    id: str
    by: str | None = None
    outcome: Literal["approved", "rejected", "answered", "completed", "authorized"]
    detail: str | None = None
    """The note, the answer, or the completion payload (as JSON text)."""


class SuspensionExpired(_Record):
    """Nobody answered in time; the Run settles ABANDONED."""

    kind: Literal["suspension_expired"] = "suspension_expired"
    reason: SuspensionReason
    id: str


class AbortRequested(_Record):
    kind: Literal["abort_requested"] = "abort_requested"
    by: str | None = None
    reason: str


class SteerReceived(_Record):
    kind: Literal["steer_received"] = "steer_received"
    mode: Literal["steer", "follow_up", "next_run"]
    message: str
    by: str | None = None


class SteerRefused(_Record):
    """A ``psych.steer`` signal the Run could not take (its update twin would have been
    refused): recorded, since a signal cannot answer its sender, so the message is not
    lost unseen. Only for the Run's own tenant, within the sizes, before it settled (any
    other signal is logged and ignored)."""

    kind: Literal["steer_refused"] = "steer_refused"
    mode: Literal["steer", "follow_up"]
    message: str
    by: str | None = None
    refusal: str
    """The ``RefusalKind`` the update would have been refused with (``NoStep``)."""
    reason: str
    """Why, as the update's refusal says it (a nested workflow's refusal names its Run)."""


class NextRunStarted(_Record):
    kind: Literal["next_run_started"] = "next_run_started"
    workflow_id: str
    message: str


StepKind = Literal["tool", "agent", "workflow"]


class StepStarted(_Record):
    """A workflow step started: a tool call, or a child Run (``run`` is its workflow id)."""

    kind: Literal["step_started"] = "step_started"
    step: str
    step_kind: StepKind
    index: int
    """1 for the first step."""
    input: Any = None
    """What the step was given: the tool's arguments, or the child Run's messages."""
    run: str | None = None


class StepFinished(_Record):
    """A workflow step ended; ``ok`` False stops the workflow at this step."""

    kind: Literal["step_finished"] = "step_finished"
    step: str
    step_kind: StepKind
    ok: bool
    output: Any = None
    """The tool's result (parsed when it is JSON), the agent's answer, or the nested
    workflow's outputs keyed by step name; also on a step that failed because its output
    would take the workflow's outputs past their bound (the Run does not keep it)."""
    error: str | None = None
    run: str | None = None
    status: RunStatus | None = None
    """The child Run's ending (agent and workflow steps)."""
    totals: Totals | None = None
    """The child Run's totals, rolled up into this Run's."""


class ChildSettled(_Record):
    """A child Run this Run started for a tool call (``delegate``, ``spawn``) ended; its
    totals are rolled up into this Run's (a workflow step's child is in ``StepFinished``)."""

    kind: Literal["child_settled"] = "child_settled"
    turn: int
    call_id: str
    """The tool call that started (or collected) the child."""
    run: str
    """The child's workflow id."""
    agent: str
    """The child's Spec name."""
    via: Literal["delegate", "spawn"]
    version_hash: str
    status: RunStatus
    reason: str
    totals: Totals
    """The child's own totals, its children's included."""


class Displayed(_Record):
    """A record a person is shown as it is: the task list, a component, the context a call
    was given. The printers hand every one to ``workers``' display helpers (match on this
    class), which match on ``DisplayRecord``: a new kind is a subclass here and a member
    there, and mypy names the helpers that must show it."""


class TasksUpdated(Displayed):
    """The model set the Run's task list (``update_tasks``); the next call's system prompt
    shows it."""

    kind: Literal["tasks_updated"] = "tasks_updated"
    turn: int
    call_id: str
    tasks: tuple[Task, ...]
    """The whole list after the change."""


class ComponentShown(Displayed):
    """The model showed a display component (``show_component``)."""

    kind: Literal["component_shown"] = "component_shown"
    turn: int
    call_id: str
    component: Component


class ContextProvided(Displayed):
    """What the worker's context providers showed one model call (by reference), and which
    were skipped or dropped; the blocks were in that call's system prompt only."""

    kind: Literal["context_provided"] = "context_provided"
    turn: int
    shown: tuple[ContextShown, ...] = ()
    skipped: tuple[ContextSkipped, ...] = ()
    budget_tokens: int

    @classmethod
    def of(cls, turn: int, context: ContextTurn, **stamp: Any) -> ContextProvided:
        """The record of one call's ``ModelCallResult.context``, field by field: a field
        added to ``ContextTurn`` later is not handed to this record blindly (it forbids
        extras, so that would fail the workflow task)."""
        return cls(
            **stamp,
            turn=turn,
            shown=context.shown,
            skipped=context.skipped,
            budget_tokens=context.budget_tokens,
        )


class CompactionApplied(_Record):
    """The conversation before ``cut_turn`` was replaced by a summary for the model; the
    records of those turns stay in the log."""

    kind: Literal["compaction_applied"] = "compaction_applied"
    turn: int
    """The turn after which the Run compacted (before the next model call)."""
    cut_turn: int
    """The first turn kept verbatim; what came before it is summarised."""
    messages_replaced: int
    """Messages the summary replaced (a previous summary among them)."""
    summary_preview: str
    summary_ref: str
    """The stored summary message, as the model sees it."""
    model: str
    usage: Usage
    cost: float | None = None
    latency: Latency


class CompactionFailed(_Record, _Billed):
    """The summariser call failed; the Run goes on uncompacted until the next trigger."""

    kind: Literal["compaction_failed"] = "compaction_failed"
    turn: int
    model: str
    error: str


class ChildSpawned(_Record):
    """A child the model composed through ``spawn`` was published and started: its
    Version's hash pins it (a replayed parent starts it from this Version, never from a
    Spec composed again)."""

    kind: Literal["child_spawned"] = "child_spawned"
    turn: int
    call_id: str
    """The ``spawn`` call."""
    run: str
    """The child's workflow id."""
    agent: str
    """The child's Spec name (the one the model gave)."""
    version_hash: str
    tools: tuple[str, ...] = ()
    """The tools the child holds (the request within the envelope and the parent's)."""
    model: str


class RunContinued(_Record):
    """The Run continued as a new execution (continue-as-new): the first record of every
    execution after the first, instead of a second ``run_admitted``."""

    kind: Literal["run_continued"] = "run_continued"
    previous_run_id: str
    """The Temporal run id of the execution that continued (its records end just before
    this one)."""
    execution: int = Field(ge=2)
    """This execution's place in the chain (the first is 1)."""
    history_length: int
    """The previous execution's history events at the cut."""
    history_size: int
    """The previous execution's history bytes at the cut."""
    deadline_used: float
    """Seconds of the deadline clock the Run had used."""


class Undelivered(_Frozen):
    """A steer or follow-up message the Run took (``steer_received``) that no model call
    answered: the Run settled first. Its caller may send it again (as a next Run's input)."""

    mode: Literal["steer", "follow_up"]
    message: str


class RunSettled(_Record, _Sparse):
    kind: Literal["run_settled"] = "run_settled"
    status: RunStatus
    reason: str
    answer: str | None = None
    totals: Totals
    outputs: dict[str, Any] | None = None
    """A workflow's step outputs keyed by step name (None for an agent)."""
    undelivered: tuple[Undelivered, ...] = ()
    """Messages the Run took and never delivered (its reason says how many): those sent
    into a model call that did not answer, then the steers and the follow-ups still queued,
    each in the order they came. Left out of the JSON when empty (``_Sparse``), so a client
    of a build before the field reads the record of every Run that delivered all it took."""
    _sparse: ClassVar[tuple[str, ...]] = ("undelivered",)


DisplayRecord = TasksUpdated | ComponentShown | ContextProvided
"""Every ``Displayed`` record."""

Record = Annotated[
    RunAdmitted
    | TurnStarted
    | ModelCallStarted
    | ModelCallFinished
    | ModelCallFailed
    | ToolCallStarted
    | ToolCallFinished
    | ToolWithheld
    | McpDiscovered
    | PeerDiscovered
    | PeerTaskCanceled
    | Suspended
    | Resumed
    | SuspensionExpired
    | AbortRequested
    | SteerReceived
    | SteerRefused
    | NextRunStarted
    | StepStarted
    | StepFinished
    | ChildSettled
    | TasksUpdated
    | ComponentShown
    | ContextProvided
    | CompactionApplied
    | CompactionFailed
    | ChildSpawned
    | RunContinued
    | RunSettled,
    Field(discriminator="kind"),
]
