"""Records, run state and the workflow's payload types (the workflow half of the contract).

A Run's log is a list of Records with a gapless ``seq`` starting at 1, each stamped with the
Run's Scope. The state query, the record stream and the report are projections of it.
Every type here is a frozen pydantic model and travels as plain JSON, so the plain
``temporal`` CLI can start, query and signal Runs.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from psych_runtime.activities._payloads import Latency, Usage
from psych_runtime.specs import Scope, Version

# --- stable names of the workflow contract -------------------------------------------------

AGENT_RUN = "AgentRun"
QUERY_STATE = "psych.state"
QUERY_RECORDS = "psych.records"

SA_TENANT = "PsychTenant"
SA_AGENT = "PsychAgent"
SA_VERSION = "PsychVersion"
SA_STATUS = "PsychStatus"
SA_SUSPENSION = "PsychSuspension"
SEARCH_ATTRIBUTES = (SA_TENANT, SA_AGENT, SA_VERSION, SA_STATUS, SA_SUSPENSION)
"""Keyword search attributes a namespace must have registered for listing Runs."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunStatus(StrEnum):
    """Where a Run is. The last five are terminal."""

    RUNNING = "running"
    COMPLETED = "completed"
    """The model answered (finished with no tool calls)."""
    STOPPED = "stopped"
    """A budget stopped it: max_turns or max_steps."""
    FAILED = "failed"
    """An error ended it: non-transient model error, retry budget, hard stop, bad Version."""
    FORCE_SETTLED = "force_settled"
    """The deadline and its grace period ran out; open calls were settled UNKNOWN."""
    ABORTED = "aborted"

    @property
    def terminal(self) -> bool:
        """Whether the Run has settled."""
        return self is not RunStatus.RUNNING


# --- input and output ---------------------------------------------------------------------


class AgentRunInput(_Frozen):
    """What starts an AgentRun. The whole Version travels, and is re-hashed at start."""

    run_id: str
    version: Version
    scope: Scope
    messages: tuple[str, ...] = Field(min_length=1)
    """The user's input message(s), in order."""


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


ToolCallStatus = Literal["ok", "error", "unknown", "refused"]


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
    call that is not safe to repeat stopped mid-call), refused (a guard withheld it)."""
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
