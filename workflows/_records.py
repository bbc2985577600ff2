"""Records, run state and the workflow's payload types (the workflow half of the contract).

A Run's log is a list of Records with a gapless ``seq`` starting at 1, each stamped with the
Run's Scope. The state query, the record stream and the report are projections of it.
Every type here is a frozen pydantic model and travels as plain JSON, so the plain
``temporal`` CLI can start, query and signal Runs.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from psych_runtime.activities._payloads import Latency, Usage
from psych_runtime.specs import Scope, Version

# --- stable names of the workflow contract -------------------------------------------------

AGENT_RUN = "AgentRun"
QUERY_STATE = "psych.state"
QUERY_RECORDS = "psych.records"
RESUME = "psych.resume"
"""Update (validated, answers) and signal (same payload, for callers without updates)."""
ABORT = "psych.abort"
"""Update and signal."""
STEER = "psych.steer"
"""Update and signal."""

SA_TENANT = "PsychTenant"
SA_AGENT = "PsychAgent"
SA_VERSION = "PsychVersion"
SA_STATUS = "PsychStatus"
SA_SUSPENSION = "PsychSuspension"
SEARCH_ATTRIBUTES = (SA_TENANT, SA_AGENT, SA_VERSION, SA_STATUS, SA_SUSPENSION)
"""Keyword search attributes a namespace must have registered for listing Runs."""


def run_search_attributes(tenant: str, agent: str, version_hash: str) -> TypedSearchAttributes:
    """The search attributes a Run starts with (status ``running``)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_TENANT), tenant),
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_AGENT), agent),
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_VERSION), version_hash),
            SearchAttributePair(SearchAttributeKey.for_keyword(SA_STATUS), "running"),
        ]
    )


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunStatus(StrEnum):
    """Where a Run is. All but RUNNING and SUSPENDED are terminal."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    """Waiting on a person or a system: an approval, an answer, an external completion."""
    COMPLETED = "completed"
    """The model answered (finished with no tool calls)."""
    STOPPED = "stopped"
    """A budget stopped it: max_turns or max_steps."""
    FAILED = "failed"
    """An error ended it: non-transient model error, retry budget, hard stop, bad Version."""
    FORCE_SETTLED = "force_settled"
    """The deadline and its grace period ran out; open calls were settled UNKNOWN."""
    ABORTED = "aborted"
    """An abort arrived; interruptible calls were cancelled, the others finished."""
    ABANDONED = "abandoned"
    """A suspension expired with nobody answering."""

    @property
    def terminal(self) -> bool:
        """Whether the Run has settled."""
        return self not in (RunStatus.RUNNING, RunStatus.SUSPENDED)


SuspensionReason = Literal["approval", "question", "external", "children"]


class Pending(_Frozen):
    """One thing a suspended Run waits for."""

    reason: SuspensionReason
    id: str
    """What a resume names: the tool call id (approval, question) or the wait token."""
    call_id: str
    tool: str
    arguments: str = ""
    question: str | None = None
    expires_at: datetime


class ResumeInput(_Frozen):
    """Payload of ``psych.resume``: an approval decision, an answer, or a completion."""

    reason: Literal["approval", "question", "external"]
    id: str
    """The pending call id (approval, question) or the external wait token."""
    tenant: str
    """The caller's tenant; another tenant's resume is refused."""
    by: str | None = None
    """Who resumes (recorded)."""
    approved: bool | None = None
    """Approvals: True runs the call, False settles it rejected."""
    note: str | None = None
    """Approvals: a reason the model is told when rejected."""
    answer: str | None = None
    """Questions: the answer."""
    payload: Any = None
    """External waits: what the waiting tool returns (JSON)."""


class ResumeResult(_Frozen):
    """Answer of the ``psych.resume`` update."""

    reason: Literal["approval", "question", "external"]
    id: str
    outcome: Literal["approved", "rejected", "answered", "completed"]


class AbortInput(_Frozen):
    """Payload of ``psych.abort``."""

    tenant: str
    by: str | None = None
    reason: str = "aborted by request"


class SteerInput(_Frozen):
    """Payload of ``psych.steer``: a message for the model, and when it should see it."""

    tenant: str
    message: str = Field(min_length=1)
    mode: Literal["steer", "follow_up", "next_run"] = "steer"
    """steer: before the current turn's next model call; follow_up: after the turn (the Run
    continues instead of ending on an answer); next_run: a new Run starts with it when this
    one settles."""
    by: str | None = None


# --- input and output ---------------------------------------------------------------------


class AgentRunInput(_Frozen):
    """What starts an AgentRun. The whole Version travels, and is re-hashed at start."""

    run_id: str
    version: Version
    scope: Scope
    messages: tuple[str, ...] = Field(min_length=1)
    """The user's input message(s), in order."""
    depth: int = Field(default=0, ge=0)
    """Delegation depth: 0 for a Run a caller started, parent's + 1 for a subagent's."""


class Totals(_Frozen):
    """Running totals of a Run."""

    turns: int = 0
    steps: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    transient_failures: int = 0
    usage: Usage = Usage()
    cost: float | None = None
    """Sum of known costs; ``None`` while any call's price was unknown."""


class RunResult(_Frozen):
    """What an AgentRun returns when it settles (other than FAILED, which fails it)."""

    run_id: str
    status: RunStatus
    reason: str
    answer: str | None = None
    totals: Totals


# --- records ------------------------------------------------------------------------------


class _Record(_Frozen):
    seq: int
    at: datetime
    scope: Scope


class RunAdmitted(_Record):
    """The Run started: which Version, which input, which system prompt."""

    kind: Literal["run_admitted"] = "run_admitted"
    version_hash: str
    agent: str
    messages: tuple[str, ...]
    system_prompt: str


class TurnStarted(_Record):
    kind: Literal["turn_started"] = "turn_started"
    turn: int


class ModelCallStarted(_Record):
    kind: Literal["model_call_started"] = "model_call_started"
    turn: int
    model: str
    attempt: int


class ModelCallFinished(_Record):
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


class ModelCallFailed(_Record):
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
    """ok, error (the tool failed or the call was invalid), unknown (the worker running a
    call that is not safe to repeat stopped mid-call), refused (a guard withheld it),
    denied (the Policy said no), rejected (an approver said no), aborted (cancelled by an
    abort)."""
    content: str
    """The result as the model was shown it (a preview when ``truncated``)."""
    truncated: bool = False
    size: int = 0
    result_ref: str | None = None
    latency: Latency | None = None


class ToolWithheld(_Record):
    """A tool failed ``failure_streak_threshold`` times in a row and is no longer offered."""

    kind: Literal["tool_withheld"] = "tool_withheld"
    tool: str
    failures: int


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
    outcome: Literal["approved", "rejected", "answered", "completed"]
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


class NextRunStarted(_Record):
    kind: Literal["next_run_started"] = "next_run_started"
    workflow_id: str
    message: str


class RunSettled(_Record):
    kind: Literal["run_settled"] = "run_settled"
    status: RunStatus
    reason: str
    answer: str | None = None
    totals: Totals


Record = Annotated[
    RunAdmitted
    | TurnStarted
    | ModelCallStarted
    | ModelCallFinished
    | ModelCallFailed
    | ToolCallStarted
    | ToolCallFinished
    | ToolWithheld
    | Suspended
    | Resumed
    | SuspensionExpired
    | AbortRequested
    | SteerReceived
    | NextRunStarted
    | RunSettled,
    Field(discriminator="kind"),
]


# --- queries ------------------------------------------------------------------------------


class RecordsQuery(_Frozen):
    """Argument of the ``psych.records`` query: records with ``seq > after``."""

    after: int = 0
    limit: int = Field(default=500, gt=0, le=5000)


class RecordsPage(_Frozen):
    records: tuple[Record, ...]
    last_seq: int
    """The highest seq the Run has written (read on from here)."""
    settled: bool
    """Whether the Run has settled (no records will follow the last one)."""


class RunState(_Frozen):
    """Answer of the ``psych.state`` query."""

    run_id: str
    tenant: str
    agent: str
    version_hash: str
    status: RunStatus
    reason: str | None = None
    answer: str | None = None
    turn: int
    last_seq: int
    totals: Totals
    withheld_tools: tuple[str, ...] = ()
    pending: tuple[Pending, ...] = ()
    """What a suspended Run waits for."""
