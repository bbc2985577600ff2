"""The workflow contract: stable names, the workflow-id rule, refusals, inputs and answers.

Everything a caller (``PsychClient``, the ``psych`` CLI, the plain ``temporal`` CLI, another
Temporal client) needs to start and drive a Run, written once and used by the workflows and
the client alike. Every payload is a frozen pydantic model that travels as plain JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError

from psych_runtime.activities.contract import ThreadRef
from psych_runtime.activities.contract import workflow_id_for as workflow_id_for
from psych_runtime.specs import (
    DepthCap,
    LeftOut,
    Scope,
    SuspensionPolicy,
    Task,
    Version,
    version_wire_data,
)
from psych_runtime.workflows.contract._carry import (
    CONTINUE_AFTER_EVENTS,
    MAX_CONTINUE_AFTER_EVENTS,
    JsonWithoutDefaults,
    RunCarry,
    Segment,
)
from psych_runtime.workflows.contract._carry import ResumeResult as ResumeResult
from psych_runtime.workflows.contract._records import (
    CallSuspensionReason,
    Pending,
    Record,
    RunStatus,
    SuspensionReason,
    Totals,
)
from psych_runtime.workflows.contract._status import _Sparse

# --- stable names --------------------------------------------------------------------------

AGENT_RUN = "AgentRun"
WORKFLOW_RUN = "WorkflowRun"
QUERY_STATE = "psych.state"
QUERY_RECORDS = "psych.records"
QUERY_KEPT_ACTION = "psych.kept_action"
"""Query: the action a Run took under an update id (``KeptAction``), in this execution or
one it continued from; null if none (``PsychClient`` asks it when Temporal no longer
knows the id: after continue-as-new)."""
RESUME = "psych.resume"
"""Update (validated, answers) and signal (same payload, for callers without updates)."""
ABORT = "psych.abort"
"""Update and signal."""
STEER = "psych.steer"
"""Update and signal."""
CANCELLED_REASON = "cancelled: the workflow was cancelled by its parent or an operator"
"""The reason of a Run that settled ABORTED as its workflow was cancelled (a parent's
expiry or deadline, an operator's ``temporal workflow cancel``), before the note of the
messages it did not deliver, if any (``PsychClient.closed`` reads it with no worker)."""
CHILD_PENDING = "psych.child_pending"
"""Signal a child Run sends its parent whenever what it waits for changes (internal)."""

SA_TENANT = "PsychTenant"
SA_AGENT = "PsychAgent"
SA_VERSION = "PsychVersion"
SA_STATUS = "PsychStatus"
SA_SUSPENSION = "PsychSuspension"
SEARCH_ATTRIBUTES = (SA_TENANT, SA_AGENT, SA_VERSION, SA_STATUS, SA_SUSPENSION)
"""Keyword search attributes a namespace must have registered for listing Runs."""


def workflow_type_for(version: Version) -> str:
    """Which workflow runs a Version: AgentRun for an agent, WorkflowRun for a workflow."""
    return AGENT_RUN if version.spec.kind == "agent" else WORKFLOW_RUN


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


@dataclass(frozen=True)
class RunHandle:
    """A dispatched Run."""

    workflow_id: str
    run_id: str
    tenant: str
    agent: str
    version_hash: str


# --- refusals ------------------------------------------------------------------------------


class RefusalKind(StrEnum):
    """Why a Run refused a resume, abort or steer (the ``type`` of its ApplicationError)."""

    ACCESS_DENIED = "AccessDenied"
    """The caller's tenant does not own the Run."""
    NOT_SUSPENDED = "NotSuspended"
    """The Run has settled (or waits for nothing)."""
    UNKNOWN_PENDING = "UnknownPending"
    """Nothing pending has that id."""
    EXPIRED = "Expired"
    """The item expired before the answer came."""
    ALREADY_ANSWERED = "AlreadyAnswered"
    WRONG_REASON = "WrongReason"
    """The item waits for another kind of answer (an approval answered as a question)."""
    BAD_RESUME = "BadResume"
    """The answer is incomplete (an approval without ``approved``)."""
    TOO_LARGE = "TooLarge"
    """A note, answer, payload or message over its size bound."""
    NO_STEP = "NoStep"
    """A workflow has no agent step running to take a steer message."""


def refusal(kind: RefusalKind, message: str) -> ApplicationError:
    """The error a validator raises: typed, and never worth retrying as it is."""
    return ApplicationError(message, type=kind.value, non_retryable=True)


MAX_TEXT_CHARS = 65_536
"""Longest note, answer or steer message an update takes (history and queries carry it)."""
MAX_CONSENT_NOTE_CHARS = 1_000
"""Longest note a refusal of an MCP server's consent takes (``authorization``,
``approved=False``): the Run repeats it to the model at every later call of that server,
in the reason of a Run it fails, and across continue-as-new. The OAuth callback's note (an
authorization server's error and description, ``workers._oauth_callback``) is within it."""
MAX_PAYLOAD_BYTES = 262_144
"""Largest external-completion payload, as JSON."""
MAX_NAME_CHARS = 1_024
"""Longest ``tenant`` and resume ``id`` an update or signal takes. Checked before anything
else, so that a refusal, which quotes them, stays small (see ``size_problem``)."""


# --- updates and signals -------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ResumeInput(_Frozen):
    """Payload of ``psych.resume``: an approval decision, an answer, or a completion."""

    reason: CallSuspensionReason
    id: str
    """The pending call id (approval, question) or the external wait token."""
    tenant: str
    """The caller's tenant; another tenant's resume is refused."""
    by: str | None = None
    """Who resumes (recorded)."""
    approved: bool | None = None
    """Approvals: True runs the call, False settles it rejected."""
    note: str | None = None
    """Approvals: a reason the model is told when rejected. A refusal of an MCP server's
    consent: why, at most ``MAX_CONSENT_NOTE_CHARS``."""
    answer: str | None = None
    """Questions: the answer."""
    payload: Any = None
    """External waits: what the waiting tool returns (JSON)."""
    run: str | None = None
    """The workflow id of the Run that holds the item (``Pending.run`` of a child's item;
    this Run's own id for its own), needed only when one id is pending in more than one
    Run; None: this Run's own item if it has one, else the first child's holding it. Left
    out of the JSON when None, so a worker of a build before the field reads the rest."""

    @model_serializer(mode="wrap")
    def _without_run(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.run is None and info.mode_is_json():
            del data["run"]
        return data


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


class ChildPending(JsonWithoutDefaults):
    """Payload of ``psych.child_pending``: everything a child Run waits for now."""

    run: str
    """The child's workflow id."""
    pending: tuple[Pending, ...] = ()
    working: bool = False
    """Whether the child also executes a call beside what it waits for (a turn's other
    calls while one waits for its approval): then its parent's deadline clock runs."""
    seq: int = Field(default=0, ge=0)
    """Increases with every report of the child, across its continue-as-new: signals sent
    in one workflow task may arrive in either order, and the parent keeps the newest
    (0: a child from before this field, whose every report is taken)."""


def name_problem(input: ResumeInput | AbortInput | SteerInput) -> str | None:
    """Which of the names a refusal quotes (``tenant``, a resume's ``id``) is over
    ``MAX_NAME_CHARS`` (None: neither). The Run's validators check it before anything else."""
    for name, text in (("tenant", input.tenant), ("id", getattr(input, "id", None))):
        if text is not None and len(text) > MAX_NAME_CHARS:
            return f"{name} is {len(text)} characters; at most {MAX_NAME_CHARS} are taken"
    return None


def size_problem(input: ResumeInput | AbortInput | SteerInput) -> str | None:
    """What of an update's payload is over its bound (None: nothing). Checked by the Run's
    validators (before any other check) and, before sending, by PsychClient.

    A worker's answer to an update, acceptance or rejection, echoes the request, and the
    rejection adds its message: both must stay under Temporal's 2 MiB blob limit, or the
    answer cannot be sent and the workflow task fails. So the names a refusal quotes
    (``tenant``, ``id``) are bounded here before any check quotes them, and a request too
    large to echo is refused by the server first (``history.maxInFlightUpdatePayloads``,
    see ``workers.UPDATE_PAYLOADS_ARGS``)."""
    problem = name_problem(input)
    if problem is not None:
        return problem
    texts: dict[str, str | None] = {"by": input.by}
    if isinstance(input, ResumeInput):
        texts |= {"note": input.note, "answer": input.answer}
        if input.payload is not None:
            size = len(json.dumps(input.payload))
            if size > MAX_PAYLOAD_BYTES:
                return f"payload is {size} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are taken"
    elif isinstance(input, AbortInput):
        texts["reason"] = input.reason
    else:
        texts["message"] = input.message
    for name, text in texts.items():
        if text is not None and len(text) > MAX_TEXT_CHARS:
            return f"{name} is {len(text)} characters; at most {MAX_TEXT_CHARS} are taken"
    return None


def consent_note_problem(input: ResumeInput) -> str | None:
    """Whether ``input`` refuses an MCP server's consent with a note over
    ``MAX_CONSENT_NOTE_CHARS`` (None: it does not). The Run's resume validator refuses such
    a request (and, since the patch ``psych-consent-note-bounded``, its signal twin); until
    12-08 a note of up to ``MAX_TEXT_CHARS`` was taken and repeated to the model whole."""
    refusal = input.reason is SuspensionReason.AUTHORIZATION and input.approved is False
    if not refusal or input.note is None or len(input.note) <= MAX_CONSENT_NOTE_CHARS:
        return None
    return (
        f"note is {len(input.note)} characters; a refusal of an MCP server's consent takes "
        f"at most {MAX_CONSENT_NOTE_CHARS}"
    )


def sent_problem(input: ResumeInput | AbortInput | SteerInput) -> str | None:
    """What ``PsychClient`` refuses before sending an update: ``size_problem``, then
    ``consent_note_problem``, as the Run's validators would."""
    problem = size_problem(input)
    if problem is None and isinstance(input, ResumeInput):
        problem = consent_note_problem(input)
    return problem


# --- input and output ----------------------------------------------------------------------


class ParentBounds(_Frozen):
    """What a parent Run imposes on a child it starts (a workflow on its agent steps)."""

    transient_retry_budget: int | None = Field(default=None, ge=0)
    """What is left of the parent's budget: the child may spend no more than this."""
    max_steps: int | None = Field(default=None, ge=1)
    """What is left of a workflow's ``max_steps``: the child takes no more steps than this
    (a workflow's limits govern the whole Run). None: the child's own limit only."""
    suspension: SuspensionPolicy | None = None
    """The parent's expiries, used for the child's waits instead of its own."""
    report_pending: bool = False
    """Send ``psych.child_pending`` to the parent whenever the pending items change."""
    left_out: tuple[LeftOut, ...] = ()
    """What a subagent's Spec asked for and its parent did not grant (``delegate``), so
    the child's ``run_admitted`` says which tool or MCP server is missing and why."""
    handed: tuple[str, ...] | None = None
    """The stored results (refs) the child may read back with ``read_tool_output``: the
    refs in its messages that are its parent's own (``features/_results.py``). None: a
    parent from before this field, whose child takes every ref in its messages."""


class RunInput(JsonWithoutDefaults):
    """What starts a Run. The whole Version travels, and is re-hashed at start.

    Its JSON (the Run's first history event, a child's start) leaves out the fields at
    their defaults, its own and its Spec's (``version_wire_data``): a Spec's full dump is
    four times its wire form, and each Run's start event carried it.
    """

    run_id: str
    version: Version
    scope: Scope
    messages: tuple[str, ...] = Field(min_length=1)
    """The user's input message(s), in order."""
    depth: int = Field(default=0, ge=0)
    """Delegation depth: 0 for a Run a caller started, parent's + 1 for a child's."""
    depth_caps: tuple[DepthCap, ...] = ()
    """``(agent, max_delegation_depth)`` of every agent above this Run on its delegation
    chain, root first (empty for a Run a caller started): with the Run's own agent, what
    ``specs.depth_refusal`` checks a child's depth against."""
    spawn_depth: int = Field(default=0, ge=0)
    """How many ``spawn`` links lead to this Run: 0 unless it is a spawned child, its
    spawner's + 1 if it is (what ``SpawnEnvelope.max_depth`` bounds)."""
    bounds: ParentBounds | None = None
    """Set by a parent Run; None for a Run a caller started."""
    thread: ThreadRef | None = None
    """The earlier Run of the same tenant this Run continues (an agent's model sees its
    conversation, bounded by ``limits.max_history_records``); None: a new conversation."""
    roles_apart: bool = False
    """Whether the fleet runs worker roles apart: then each activity is scheduled on its
    role's task queue (``<queue>-model``, ``<queue>-tools``); False (one queue) schedules
    every activity on the Run's own queue, where the SDK dispatches it eagerly. Decided by
    the fleet: a Run started False learns at its start whether the workflows-role worker
    runs roles apart (recorded, ``fleet_roles_apart``); a client may still set it
    (``PsychClient(roles_apart=...)``, ``PSYCH_ROLES_APART``). Inherited by children, next
    Runs and continue-as-new."""
    continue_after_events: int = Field(
        default=CONTINUE_AFTER_EVENTS, ge=1, le=MAX_CONTINUE_AFTER_EVENTS
    )
    """A Run continues as new at the first turn boundary (a WorkflowRun: between two
    steps) at which its execution's history has this many events (or Temporal suggests
    it); see ``_continue.py``."""
    carry: RunCarry | None = None
    """Set by continue-as-new: what the execution before this one hands on (None for a
    Run's first execution)."""

    @field_serializer("version", when_used="json")
    def _version(self, version: Version) -> dict[str, Any]:
        return version_wire_data(version)


class AgentRunInput(RunInput):
    """What starts an AgentRun (a Version of an AgentSpec)."""


class WorkflowRunInput(RunInput):
    """What starts a WorkflowRun (a Version of a WorkflowSpec)."""


class RunResult(_Frozen):
    """What a Run returns when it settles (other than FAILED, which fails it)."""

    run_id: str
    status: RunStatus
    reason: str
    answer: str | None = None
    totals: Totals
    outputs: dict[str, Any] | None = None
    """A workflow's step outputs keyed by step name (None for an agent)."""
    handles: tuple[str, ...] = ()
    """The stored results (refs) this Run owns that its answer or outputs name: its parent
    may hand them on (a workflow to its next steps)."""


# --- queries -------------------------------------------------------------------------------


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
    earlier: tuple[Segment, ...] = ()
    """A continued Run's earlier executions and the seqs each holds, oldest first: records
    before this execution's first are read by querying those executions by run id."""


class RunState(_Sparse):
    """Answer of the ``psych.state`` query."""

    _sparse: ClassVar[tuple[str, ...]] = ("withdrawn_tools",)

    run_id: str
    tenant: str
    agent: str
    """The Spec's name (an agent's or a workflow's)."""
    version_hash: str
    status: RunStatus
    reason: str | None = None
    answer: str | None = None
    turn: int
    last_seq: int
    totals: Totals
    withheld_tools: tuple[str, ...] = ()
    withdrawn_tools: tuple[str, ...] = ()
    """Code and HTTP tools of the Spec this execution does not offer because the tenant's
    permits refuse them: withdrawn once a call of one was refused (a permit revoked while
    the Run worked), then those its catalogue left out (a Run continued as new after that,
    or one started without the permits check). Left out of the JSON when empty
    (``_Sparse``), so a client of a build before it reads every state that does not use it."""
    pending: tuple[Pending, ...] = ()
    """What a suspended Run waits for, its children's items included (``Pending.run``)."""
    kind: Literal["agent", "workflow"] = "agent"
    step: str | None = None
    """A workflow's running step."""
    outputs: dict[str, Any] | None = None
    """A workflow's step outputs so far, keyed by step name."""
    tasks: tuple[Task, ...] = ()
    """The task list (``update_tasks``; empty unless ``tasks_enabled``)."""
    conversation_ref: str | None = None
    """An agent's conversation head after its last model call (what a Run continuing this
    one reads, ``PsychClient.dispatch(thread=...)``); None before its first call."""
