"""AgentRun: the durable turn loop of one agent Run.

A Turn is one model-call activity, then the turn's tool calls run concurrently with their
results taken in call order, until a stop condition (see SEMANTICS "The turn loop",
"Limits"). Everything here is deterministic: time from ``workflow.now()``, no I/O, no set
iteration; every side effect is an activity scheduled by a stable name.

Retries are owned here, not by Temporal's retry policy and not by provider SDKs: model
activities never retry on their own; a transient failure costs one unit of the Run's
``transient_retry_budget`` and the next attempt goes to the next model in
``[model, *fallbacks]`` (same model again only after its Retry-After or a backoff).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities._payloads import (
        MODEL_COMPLETE,
        POLICY_DECIDE,
        TOOL_CATALOG,
        TOOL_CODE,
        TOOL_HTTP,
        TOOL_READ_OUTPUT,
        CatalogEntry,
        CatalogInput,
        ChatMessage,
        CodeToolCall,
        HttpToolCall,
        ModelCallInput,
        ModelCallResult,
        ModelFailure,
        PolicyDecision,
        PolicyInput,
        ReadOutputInput,
        ToolCallRequest,
        ToolCatalog,
        ToolDefinition,
        ToolOutcome,
        Usage,
    )
    from psych_runtime.specs import (
        AgentSpec,
        HttpTool,
        Version,
        narrow,
        system_prompt,
        version_hash,
    )
    from psych_runtime.workflows._records import (
        ABORT,
        AGENT_RUN,
        QUERY_RECORDS,
        QUERY_STATE,
        RESUME,
        SA_STATUS,
        SA_SUSPENSION,
        STEER,
        AbortInput,
        AbortRequested,
        AgentRunInput,
        ModelCallFailed,
        ModelCallFinished,
        ModelCallStarted,
        NextRunStarted,
        Pending,
        RecordsPage,
        RecordsQuery,
        Resumed,
        ResumeInput,
        ResumeResult,
        RunAdmitted,
        RunResult,
        RunSettled,
        RunState,
        RunStatus,
        SteerInput,
        SteerReceived,
        Suspended,
        SuspensionExpired,
        ToolCallFinished,
        ToolCallStarted,
        ToolCallStatus,
        ToolWithheld,
        Totals,
        TurnStarted,
        run_search_attributes,
    )

RECORDS_PAGE_BYTES = 1_000_000
"""Most JSON bytes of records one ``psych.records`` answer carries (gRPC caps messages)."""

DEADLINE_GRACE_SECONDS = 30.0
"""After the deadline, in-flight calls get this long to finish before FORCE_SETTLED."""

MODEL_CALL_TIMEOUT = timedelta(minutes=10)
MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
TOOL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
CODE_TOOL_TIMEOUT = timedelta(minutes=10)
SAFE_TOOL_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
"""Infrastructure retries (a worker died, a timeout) of tools that are safe to repeat."""
ONCE = RetryPolicy(maximum_attempts=1)
"""Model calls (the workflow counts retries) and tools not safe to repeat (never twice)."""

UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: the worker running it stopped before reporting, "
    "and the tool is not safe to repeat, so it was not run again. It may or may not have "
    "taken effect; check before relying on either."
)

BUILTIN_READ_TOOL_OUTPUT = ToolDefinition(
    name="read_tool_output",
    description=(
        "Read part of a large tool result that was stored whole and shown to you as a "
        "handle with a preview."
    ),
    parameters={
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "The handle the result gave."},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "length": {"type": "integer", "minimum": 1, "maximum": 65536, "default": 8192},
        },
        "required": ["handle"],
        "additionalProperties": False,
    },
)
BUILTIN_LOAD_SKILL = ToolDefinition(
    name="load_skill",
    description="Load the full instructions of one of your skills by name.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name."}},
        "required": ["name"],
        "additionalProperties": False,
    },
)

BUILTIN_ASK_QUESTION = ToolDefinition(
    name="ask_question",
    description=(
        "Ask the person you work for a question and wait for the answer. Use it only when "
        "you cannot go on without their input."
    ),
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question."}},
        "required": ["question"],
        "additionalProperties": False,
    },
)

ABORTED_CALL = "The call was cancelled: the Run was aborted."


def _delegate_definition(spec: AgentSpec) -> ToolDefinition:
    return ToolDefinition(
        name="delegate",
        description=(
            "Hand a task to one of your subagents and wait for its answer. Give it "
            "everything it needs in the task: it does not see this conversation."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": [s.name for s in spec.subagents]},
                "task": {"type": "string", "description": "The task, self-contained."},
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        },
    )


_STATUS_KEY = SearchAttributeKey.for_keyword(SA_STATUS)
_SUSPENSION_KEY = SearchAttributeKey.for_keyword(SA_SUSPENSION)


@dataclass
class _Outcome:
    status: RunStatus
    reason: str
    answer: str | None = None


@dataclass
class _ToolResult:
    call: ToolCallRequest
    status: ToolCallStatus
    message: ChatMessage | str
    """Inline message the workflow made, or the ref of one the activity stored."""
    content: str
    outcome: ToolOutcome | None = None
    counts_as_failure: bool = False
    repeat_refusal: bool = False


@dataclass
class _Guards:
    """Failure-streak and repeat-call bookkeeping."""

    streaks: dict[str, int] = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)
    repeats: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)


@dataclass
class _Wait:
    """One pending suspension item and, once it came, its answer."""

    item: Pending
    answer: ResumeInput | None = None


class _Stop(Exception):
    """Raised inside the loop to settle the Run."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.outcome = _Outcome(status, reason)


@workflow.defn(name=AGENT_RUN)
class AgentRun:
    """One agent Run (see the module docstring)."""

    @workflow.init
    def __init__(self, input: AgentRunInput) -> None:
        self._input = input
        self._records: list[Any] = []
        self._status = RunStatus.RUNNING
        self._reason: str | None = None
        self._answer: str | None = None
        self._turn = 0
        self._totals = Totals()
        self._guards = _Guards()
        self._deadline_hit = False
        self._open_calls: dict[str, tuple[int, str]] = {}
        self._not_before: dict[str, float] = {}
        self._model_failures: dict[str, int] = {}
        self._cost_unknown = False
        self._pending: dict[str, _Wait] = {}
        self._expired: set[str] = set()
        self._abort: AbortInput | None = None
        self._interruptible: dict[str, asyncio.Task[Any]] = {}
        self._model_task: asyncio.Task[Any] | None = None
        self._steer: list[str] = []
        self._follow_up: list[str] = []
        self._next_run: list[str] = []
        self._shown_status: tuple[RunStatus, str | None] = (RunStatus.RUNNING, None)
        self._delegations: dict[int, int] = {}

    # --- queries -------------------------------------------------------------------------

    @workflow.query(name=QUERY_STATE)
    def state(self) -> RunState:
        """The Run's current state."""
        spec = self._input.version.spec
        return RunState(
            run_id=self._input.run_id,
            tenant=self._input.scope.tenant,
            agent=spec.name,
            version_hash=self._input.version.hash,
            status=self._status,
            reason=self._reason,
            answer=self._answer,
            turn=self._turn,
            last_seq=len(self._records),
            totals=self._totals,
            withheld_tools=tuple(self._guards.withheld),
            pending=tuple(w.item for w in self._pending.values()),
        )

    @workflow.query(name=QUERY_RECORDS)
    def records(self, query: RecordsQuery) -> RecordsPage:
        """Records with ``seq > query.after``: at most ``query.limit`` of them, and fewer
        when they would exceed ``RECORDS_PAGE_BYTES`` (a query answer has a size limit)."""
        start = max(query.after, 0)
        page: list[Any] = []
        size = 0
        for record in self._records[start : start + query.limit]:
            size += len(record.model_dump_json())
            if page and size > RECORDS_PAGE_BYTES:
                break
            page.append(record)
        settled = bool(self._records) and isinstance(self._records[-1], RunSettled)
        return RecordsPage(records=tuple(page), last_seq=len(self._records), settled=settled)

    # --- resume, abort, steer (updates, and signals for callers without updates) ---------

    def _check_caller(self, tenant: str) -> None:
        if tenant != self._input.scope.tenant:
            raise ApplicationError(
                f"tenant {tenant!r} may not act on this Run", type="AccessDenied"
            )
        if self._status.terminal:
            raise ApplicationError(
                f"the Run has settled {self._status.value}: {self._reason}", type="NotSuspended"
            )

    @workflow.update(name=RESUME)
    def resume(self, input: ResumeInput) -> ResumeResult:
        """Answer a pending approval, question or external wait (exactly once)."""
        return self._resume(input)

    def _resume(self, input: ResumeInput) -> ResumeResult:
        self._validate_resume(input)  # again: two updates may pass validation in one task
        wait = self._pending[input.id]
        wait.answer = input
        if input.reason == "approval":
            outcome = "approved" if input.approved else "rejected"
            detail = input.note
        elif input.reason == "question":
            outcome, detail = "answered", input.answer
        else:
            outcome, detail = "completed", json.dumps(input.payload)
        self._record(
            Resumed, reason=input.reason, id=input.id, by=input.by, outcome=outcome, detail=detail
        )
        return ResumeResult(reason=input.reason, id=input.id, outcome=outcome)

    @resume.validator
    def _validate_resume(self, input: ResumeInput) -> None:
        self._check_caller(input.tenant)
        wait = self._pending.get(input.id)
        if wait is None:
            if input.id in self._expired:
                raise ApplicationError(f"{input.id!r} expired", type="Expired")
            waiting = ", ".join(self._pending) or "nothing"
            raise ApplicationError(
                f"nothing pending with id {input.id!r} (pending: {waiting})", type="UnknownPending"
            )
        if wait.answer is not None:
            raise ApplicationError(f"{input.id!r} was already answered", type="AlreadyAnswered")
        if wait.item.reason != input.reason:
            raise ApplicationError(
                f"{input.id!r} waits for {wait.item.reason}, not {input.reason}",
                type="WrongReason",
            )
        if workflow.now() >= wait.item.expires_at:
            raise ApplicationError(f"{input.id!r} expired", type="Expired")
        if input.reason == "approval" and input.approved is None:
            raise ApplicationError("an approval needs approved=true or false", type="BadResume")
        if input.reason == "question" and input.answer is None:
            raise ApplicationError("an answer needs answer text", type="BadResume")

    @workflow.signal(name=RESUME)
    def resume_signal(self, input: ResumeInput) -> None:
        """``psych.resume`` as a signal; an invalid one is logged and ignored."""
        _as_signal(RESUME, self._resume, input)

    @workflow.update(name=ABORT)
    def abort(self, input: AbortInput) -> None:
        """Abort the Run: interruptible calls are cancelled, the others finish."""
        self._do_abort(input)

    def _do_abort(self, input: AbortInput) -> None:
        self._check_caller(input.tenant)  # again, for the signal, which has no validator
        if self._abort is not None:
            return
        self._abort = input
        self._record(AbortRequested, by=input.by, reason=input.reason)
        for task in self._interruptible.values():
            task.cancel()
        if self._model_task is not None:
            self._model_task.cancel()

    @abort.validator
    def _validate_abort(self, input: AbortInput) -> None:
        self._check_caller(input.tenant)

    @workflow.signal(name=ABORT)
    def abort_signal(self, input: AbortInput) -> None:
        """``psych.abort`` as a signal; an invalid one is logged and ignored."""
        _as_signal(ABORT, self._do_abort, input)

    @workflow.update(name=STEER)
    def steer(self, input: SteerInput) -> None:
        """Queue a message: into this turn, after it, or for the next Run."""
        self._do_steer(input)

    def _do_steer(self, input: SteerInput) -> None:
        self._check_caller(input.tenant)  # again, for the signal, which has no validator
        self._record(SteerReceived, mode=input.mode, message=input.message, by=input.by)
        queue = {"steer": self._steer, "follow_up": self._follow_up, "next_run": self._next_run}
        queue[input.mode].append(input.message)

    @steer.validator
    def _validate_steer(self, input: SteerInput) -> None:
        self._check_caller(input.tenant)

    @workflow.signal(name=STEER)
    def steer_signal(self, input: SteerInput) -> None:
        """``psych.steer`` as a signal; an invalid one is logged and ignored."""
        _as_signal(STEER, self._do_steer, input)

    # --- run -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: AgentRunInput) -> RunResult:
        """Run the turn loop to a settled state."""
        spec = input.version.spec
        if not isinstance(spec, AgentSpec):
            return await self._settle(
                _Outcome(RunStatus.FAILED, f"Version {input.version.hash} is not an agent")
            )
        actual = version_hash(spec)
        if actual != input.version.hash:
            return await self._settle(
                _Outcome(
                    RunStatus.FAILED,
                    f"version_mismatch: input states {input.version.hash} but its spec "
                    f"hashes to {actual}",
                )
            )
        expected = f"psych-{input.scope.tenant}-{input.run_id}"
        if workflow.patched("psych-workflow-id") and workflow.info().workflow_id != expected:
            # Clients authorize by the tenant in the id: a Run started by hand under an
            # id that names another tenant must not run (its records would leak).
            return await self._settle(
                _Outcome(
                    RunStatus.FAILED,
                    f"workflow_id: a Run of tenant {input.scope.tenant!r} and run id "
                    f"{input.run_id!r} must have workflow id {expected!r}, not "
                    f"{workflow.info().workflow_id!r}",
                )
            )
        self._spec = spec
        self._tools = {tool.name: tool for tool in spec.tools}
        self._system_prompt = system_prompt(spec)
        self._record(
            RunAdmitted,
            version_hash=input.version.hash,
            agent=spec.name,
            messages=input.messages,
            system_prompt=self._system_prompt,
        )
        loop = asyncio.create_task(self._loop())
        try:
            if not await self._within_deadline(loop, spec.limits.deadline_seconds):
                self._deadline_hit = True
                try:
                    await workflow.wait_condition(
                        loop.done, timeout=DEADLINE_GRACE_SECONDS, timeout_summary="deadline grace"
                    )
                except TimeoutError:
                    # Taken before cancelling: a cancelled call leaves _open_calls as it
                    # unwinds.
                    open_calls = dict(self._open_calls)
                    loop.cancel()
                    await workflow.wait([loop])
                    return await self._settle(self._force_settle(open_calls))
        except asyncio.CancelledError:
            # The workflow itself was cancelled (a parent's delegate expired, or an operator
            # cancelled it): stop the loop, settle the record and the search attributes,
            # then let the cancellation end the workflow as Temporal expects.
            loop.cancel()
            await workflow.wait([loop])
            self._status = RunStatus.ABORTED
            self._reason = "cancelled: the workflow was cancelled by its parent or an operator"
            self._record(RunSettled, status=self._status, reason=self._reason, totals=self._totals)
            self._show_status()
            raise
        return await self._settle(loop.result())

    async def _within_deadline(self, loop: asyncio.Task[_Outcome], deadline: float) -> bool:
        """Wait for the loop; False when ``deadline`` seconds of unsuspended time ran out.

        Time spent suspended (waiting for a person or a system, each wait bounded by its own
        expiry) does not count: the deadline bounds the Run's work, not its waiting. The
        clock runs whenever any call is executing, even beside a suspended one.
        """
        used = 0.0
        while not loop.done():
            if self._suspended_only():
                await workflow.wait_condition(lambda: loop.done() or not self._suspended_only())
                continue
            started = workflow.time()
            try:
                await workflow.wait_condition(
                    lambda: loop.done() or self._suspended_only(),
                    timeout=deadline - used,
                    timeout_summary="deadline",
                )
            except TimeoutError:
                return False
            used += workflow.time() - started
        return True

    def _suspended_only(self) -> bool:
        """Whether the Run only waits: something is pending and no call is executing."""
        return bool(self._pending) and not self._open_calls

    def _force_settle(self, open_calls: dict[str, tuple[int, str]]) -> _Outcome:
        for call_id, (turn, tool) in sorted(open_calls.items()):
            self._record(
                ToolCallFinished,
                turn=turn,
                call_id=call_id,
                tool=tool,
                status="unknown",
                content="the Run's deadline and grace period ran out before this call reported",
            )
        return _Outcome(
            RunStatus.FORCE_SETTLED,
            f"deadline: {self._spec.limits.deadline_seconds:g} s and "
            f"{DEADLINE_GRACE_SECONDS:g} s grace passed",
        )

    async def _settle(self, outcome: _Outcome) -> RunResult:
        self._status = outcome.status
        self._reason = outcome.reason
        self._answer = outcome.answer
        # The status goes out first (the command order committed histories have), the next
        # Runs start, and only then is run_settled written: it is the last record.
        self._show_status()
        for index, message in enumerate(self._next_run, start=1):
            await self._start_next_run(index, message)
        self._record(
            RunSettled,
            status=outcome.status,
            reason=outcome.reason,
            answer=outcome.answer,
            totals=self._totals,
        )
        if outcome.status is RunStatus.FAILED:
            raise ApplicationError(outcome.reason, type="RunFailed", non_retryable=True)
        return RunResult(
            run_id=self._input.run_id,
            status=outcome.status,
            reason=outcome.reason,
            answer=outcome.answer,
            totals=self._totals,
        )

    def _show_status(self) -> None:
        """Put the Run's status and suspension reason where listing sees them."""
        reasons = sorted({w.item.reason for w in self._pending.values()})
        suspension = ",".join(reasons) or None
        if self._status is RunStatus.RUNNING and suspension:
            status = RunStatus.SUSPENDED
        elif self._status is RunStatus.SUSPENDED and not suspension:
            status = RunStatus.RUNNING
        else:
            status = self._status
        self._status = status
        if (status, suspension) == self._shown_status:
            return
        self._shown_status = (status, suspension)
        # A Run started without psych's search attributes (PsychClient(search_attributes=
        # False), for a server that has none registered, like the time-skipping test
        # server) must not upsert one: the server would fail every workflow task. What the
        # Run was started with is in its history, so the choice is deterministic.
        if workflow.info().typed_search_attributes.get(_STATUS_KEY) is None:
            return
        workflow.upsert_search_attributes(
            [
                _STATUS_KEY.value_set(status.value),
                _SUSPENSION_KEY.value_set(suspension)
                if suspension
                else _SUSPENSION_KEY.value_unset(),
            ]
        )

    async def _start_run(
        self,
        run_id: str,
        version: Version,
        message: str,
        *,
        depth: int,
        summary: str,
        parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    ) -> workflow.ChildWorkflowHandle[Any, RunResult]:
        """Start another AgentRun of this tenant as a child workflow."""
        workflow_id = f"psych-{self._input.scope.tenant}-{run_id}"
        attributes = None
        if workflow.info().typed_search_attributes.get(_STATUS_KEY) is not None:
            attributes = run_search_attributes(
                self._input.scope.tenant, version.spec.name, version.hash
            )
        return await workflow.start_child_workflow(
            AGENT_RUN,
            AgentRunInput(
                run_id=run_id,
                version=version,
                scope=self._input.scope,
                messages=(message,),
                depth=depth,
            ),
            id=workflow_id,
            result_type=RunResult,
            parent_close_policy=parent_close_policy,
            search_attributes=attributes,
            static_summary=summary,
        )

    async def _start_next_run(self, index: int, message: str) -> None:
        """Start a Run of the same Version with a queued next-run message. It outlives this
        Run, so the parent-close policy abandons it rather than terminating it."""
        child = await self._start_run(
            f"{self._input.run_id}-next{index}",
            self._input.version,
            message,
            depth=self._input.depth,
            summary=f"next Run of {self._input.run_id}",
            parent_close_policy=ParentClosePolicy.ABANDON,
        )
        self._record(NextRunStarted, workflow_id=child.id, message=message)

    # --- suspensions ---------------------------------------------------------------------

    async def _suspend(self, item: Pending, expires_seconds: float) -> ResumeInput:
        """Wait for ``item`` to be answered; settle ABANDONED if it expires first."""
        wait = _Wait(item)
        await self._hold(
            wait,
            lambda: wait.answer is not None,
            expires_seconds,
            f"{item.reason} {item.id} was not answered",
        )
        assert wait.answer is not None
        return wait.answer

    async def _hold(
        self, wait: _Wait, ready: Callable[[], bool], seconds: float, expired: str
    ) -> None:
        """Suspend on ``wait`` until ``ready()``.

        Raises:
            _Stop: ABANDONED when ``seconds`` pass first, ABORTED when an abort arrives.
        """
        item = wait.item
        self._pending[item.id] = wait
        self._record(Suspended, pending=item)
        self._show_status()
        try:
            await workflow.wait_condition(
                lambda: ready() or self._abort is not None,
                timeout=seconds,
                timeout_summary=f"{item.reason} {item.id} expires",
            )
        except TimeoutError:
            self._release(item.id)
            self._expired.add(item.id)
            self._record(SuspensionExpired, reason=item.reason, id=item.id)
            raise _Stop(
                RunStatus.ABANDONED, f"suspension_expired: {expired} within {seconds:g} s"
            ) from None
        except asyncio.CancelledError:
            # Deliberately not a `finally`: when a worker stops, the SDK leaves its cached
            # Runs to the garbage collector, which closes this coroutine (GeneratorExit)
            # outside any workflow, where the release's upsert would raise.
            self._release(item.id)
            raise
        self._release(item.id)
        if not ready():
            raise _Stop(RunStatus.ABORTED, self._abort_reason())

    def _release(self, pending_id: str) -> None:
        del self._pending[pending_id]
        self._show_status()

    def _abort_reason(self) -> str:
        assert self._abort is not None
        by = f" by {self._abort.by}" if self._abort.by else ""
        return f"aborted{by}: {self._abort.reason}"

    def _check_abort(self) -> None:
        if self._abort is not None:
            raise _Stop(RunStatus.ABORTED, self._abort_reason())

    def _expires_at(self, seconds: float) -> Any:
        return workflow.now() + timedelta(seconds=seconds)

    # --- the loop ------------------------------------------------------------------------

    async def _loop(self) -> _Outcome:
        try:
            return await self._turns()
        except _Stop as stop:
            return stop.outcome
        except (ActivityError, ChildWorkflowError) as err:
            # An activity or child that failed where no caller handles it (the policy
            # activity, starting a subagent): the Run fails, with its record settled.
            return _Outcome(RunStatus.FAILED, f"{type(err).__name__}: {_cause(err)}")

    async def _turns(self) -> _Outcome:
        spec = self._spec
        limits = spec.limits
        catalog = await self._catalog()
        offered = {entry.name: entry for entry in catalog.entries}
        pending: list[ChatMessage | str] = [
            ChatMessage(role="user", content=text) for text in self._input.messages
        ]
        context_ref: str | None = None
        system_ref: str | None = None
        while True:
            self._check_abort()
            if self._past_deadline():
                return self._deadline_outcome()
            if self._turn >= limits.max_turns:
                return _Outcome(RunStatus.STOPPED, f"max_turns: {limits.max_turns} turns taken")
            if self._totals.steps >= limits.max_steps:
                return _Outcome(RunStatus.STOPPED, f"max_steps: {limits.max_steps} steps taken")
            self._turn += 1
            turn = self._turn
            self._totals = self._totals.model_copy(update={"turns": turn})
            self._record(TurnStarted, turn=turn)
            pending += self._take(self._steer)
            result = await self._call_model(
                turn,
                ModelCallInput(
                    run_id=self._input.run_id,
                    turn=turn,
                    model=spec.model.model,
                    params=spec.model,
                    system_prompt=self._system_prompt if system_ref is None else None,
                    system_ref=system_ref,
                    context_ref=context_ref,
                    new_messages=tuple(pending),
                    tools_ref=catalog.tools_ref,
                    exclude_tools=tuple(self._guards.withheld),
                    stream_idle_seconds=limits.stream_idle_seconds,
                    scope=self._input.scope,
                ),
            )
            context_ref, system_ref = result.context_ref, result.system_ref
            pending = []
            self._check_abort()
            if not result.tool_calls:
                # Input that arrived for this turn, or for after it, continues the Run.
                pending = self._take(self._steer) + self._take(self._follow_up)
                if not pending:
                    return _Outcome(RunStatus.COMPLETED, "answered", answer=result.text)
                continue
            if self._past_deadline():
                return self._deadline_outcome()
            pending = await self._run_tools(turn, result.tool_calls, offered)
            self._check_abort()

    @staticmethod
    def _take(queue: list[str]) -> list[ChatMessage | str]:
        messages: list[ChatMessage | str] = [ChatMessage(role="user", content=m) for m in queue]
        queue.clear()
        return messages

    def _ready_model(self, models: list[str], index: int) -> str:
        """From ``index`` on, in order, the first model not waiting out a Retry-After or a
        backoff; if all are, the one ready soonest. So a fallback that just answered keeps
        answering while the primary waits, across turns too."""
        now = workflow.time()
        ordered = [models[(index + k) % len(models)] for k in range(len(models))]
        ready = [m for m in ordered if self._not_before.get(m, 0.0) <= now]
        if ready:
            return ready[0]
        return min(ordered, key=lambda m: self._not_before.get(m, 0.0))

    def _past_deadline(self) -> bool:
        # A method, not the attribute: mypy narrows an attribute read before an await to
        # False and would call the check after it unreachable.
        return self._deadline_hit

    def _deadline_outcome(self) -> _Outcome:
        return _Outcome(
            RunStatus.FORCE_SETTLED,
            f"deadline: {self._spec.limits.deadline_seconds:g} s passed",
        )

    async def _catalog(self) -> ToolCatalog:
        try:
            return await self._catalog_activity()
        except ActivityError as err:
            raise _Stop(RunStatus.FAILED, f"tools: {_cause(err)}") from err

    async def _catalog_activity(self) -> ToolCatalog:
        spec = self._spec
        builtins = [BUILTIN_READ_TOOL_OUTPUT]
        if spec.skills:
            builtins.append(BUILTIN_LOAD_SKILL)
        if spec.suspension.may_ask_questions:
            builtins.append(BUILTIN_ASK_QUESTION)
        if spec.subagents:
            builtins.append(_delegate_definition(spec))
        catalog: ToolCatalog = await workflow.execute_activity(
            TOOL_CATALOG,
            CatalogInput(
                run_id=self._input.run_id,
                code_tools=tuple(t.name for t in spec.tools if t.kind == "code"),
                http_tools=tuple(t for t in spec.tools if isinstance(t, HttpTool)),
                builtins=tuple(builtins),
            ),
            result_type=ToolCatalog,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(
                maximum_attempts=5, non_retryable_error_types=["ToolNotRegistered"]
            ),
            summary="resolve tools",
        )
        return catalog

    # --- model calls ---------------------------------------------------------------------

    async def _call_model(self, turn: int, call: ModelCallInput) -> ModelCallResult:
        limits = self._spec.limits
        models = [self._spec.model.model, *self._spec.model.fallbacks]
        index = 0
        attempt = 0
        while True:
            model = self._ready_model(models, index)
            wait = self._not_before.get(model, 0.0) - workflow.time()
            if wait > 0:
                # An abort ends the wait: no billable call starts after it.
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: self._abort is not None,
                        timeout=wait,
                        timeout_summary=f"retry {model}",
                    )
            self._check_abort()
            if self._past_deadline():
                # The grace period is for calls already in flight, not for new attempts.
                outcome = self._deadline_outcome()
                raise _Stop(outcome.status, outcome.reason)
            attempt += 1
            self._record(ModelCallStarted, turn=turn, model=model, attempt=attempt)
            self._count(steps=1, model_calls=1)
            self._model_task = asyncio.create_task(
                workflow.execute_activity(
                    MODEL_COMPLETE,
                    call.model_copy(update={"model": model}),
                    result_type=ModelCallResult,
                    start_to_close_timeout=MODEL_CALL_TIMEOUT,
                    heartbeat_timeout=MODEL_HEARTBEAT_TIMEOUT,
                    retry_policy=ONCE,
                    summary=f"model {model}, turn {turn}",
                )
            )
            try:
                result: ModelCallResult = await self._model_task
            except asyncio.CancelledError:
                if self._abort is None:
                    raise
                raise _Stop(RunStatus.ABORTED, self._abort_reason()) from None
            except ActivityError as err:
                self._model_task = None
                self._check_abort()
                if _was_cancelled(err):
                    # The workflow is being cancelled (or force-settled): not a model failure.
                    raise asyncio.CancelledError from err
                failure = _model_failure(err)
                budget_left = limits.transient_retry_budget - self._totals.transient_failures
                if failure.transient:
                    budget_left -= 1
                self._record(
                    ModelCallFailed,
                    turn=turn,
                    model=model,
                    transient=failure.transient,
                    status=failure.status,
                    retry_after=failure.retry_after,
                    message=failure.message,
                    budget_left=max(budget_left, 0),
                )
                if not failure.transient:
                    raise _Stop(RunStatus.FAILED, f"model_error: {failure.message}") from err
                self._count(transient_failures=1)
                if budget_left < 0:
                    raise _Stop(
                        RunStatus.FAILED,
                        f"transient_retry_budget exhausted: {limits.transient_retry_budget} "
                        f"retries spent; last failure: {failure.message}",
                    ) from err
                failures = self._model_failures.get(model, 0) + 1
                self._model_failures[model] = failures
                delay = (
                    failure.retry_after
                    if failure.retry_after is not None
                    else min(0.5 * 2 ** (failures - 1), 30.0)
                )
                self._not_before[model] = workflow.time() + delay
                index += 1
                continue
            self._model_task = None
            self._model_failures.pop(result.model, None)
            self._record(
                ModelCallFinished,
                turn=turn,
                model=result.model,
                text=result.text,
                tool_calls=tuple(
                    {"id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in result.tool_calls
                ),
                finish_reason=result.finish_reason,
                usage=result.usage,
                cost=result.cost,
                latency=result.latency,
            )
            self._add_usage(result.usage, result.cost)
            return result

    # --- tool calls ----------------------------------------------------------------------

    async def _run_tools(
        self,
        turn: int,
        calls: tuple[ToolCallRequest, ...],
        offered: dict[str, CatalogEntry],
    ) -> list[ChatMessage | str]:
        limits = self._spec.limits
        room = max(min(limits.max_tool_calls_per_turn, limits.max_steps - self._totals.steps), 0)
        for call in calls:
            self._record(
                ToolCallStarted,
                turn=turn,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
            )
        # Counted before they run, so a Run force-settled mid-turn still counts its calls.
        self._count(steps=len(calls[:room]), tool_calls=len(calls))
        tasks = [asyncio.create_task(self._run_tool(turn, call, offered)) for call in calls[:room]]
        # Every call is waited for and recorded before any stop takes effect: an abort or an
        # expiry raised by one call must not leave the turn's other calls unrecorded (a
        # non-interruptible one finishes, and its result is recorded).
        stop: _Stop | None = None
        results: list[_ToolResult] = []
        for call, outcome in zip(
            calls[:room], await asyncio.gather(*tasks, return_exceptions=True), strict=True
        ):
            if isinstance(outcome, _ToolResult):
                results.append(outcome)
            elif isinstance(outcome, _Stop):
                stop = stop or outcome
                status: ToolCallStatus = (
                    "aborted" if outcome.outcome.status is RunStatus.ABORTED else "rejected"
                )
                result = self._inline(call, status, f"not run: {outcome.outcome.reason}")
                result.counts_as_failure = False
                results.append(result)
            else:
                raise outcome
        for call in calls[room:]:
            reason = (
                f"not run: more than max_tool_calls_per_turn ({limits.max_tool_calls_per_turn}) "
                "calls in one turn"
                if len(calls) > limits.max_tool_calls_per_turn
                else f"not run: the Run's max_steps ({limits.max_steps}) is used up"
            )
            results.append(self._inline(call, "error", reason))
        notes: list[ChatMessage | str] = []
        for result in results:
            try:
                self._after_tool(turn, result, notes)
            except _Stop as hard_stop:
                stop = stop or hard_stop
        if stop is not None:
            raise stop
        return [r.message for r in results] + notes

    def _inline(self, call: ToolCallRequest, status: ToolCallStatus, text: str) -> _ToolResult:
        return _ToolResult(
            call=call,
            status=status,
            message=ChatMessage(role="tool", content=text, tool_call_id=call.id),
            content=text,
            counts_as_failure=status in ("error", "refused"),
        )

    async def _run_tool(
        self, turn: int, call: ToolCallRequest, offered: dict[str, CatalogEntry]
    ) -> _ToolResult:
        guards = self._guards
        if call.name in guards.withheld:
            return self._inline(
                call,
                "refused",
                f"{call.name} is withheld: it failed {self._spec.limits.failure_streak_threshold}"
                " times in a row. Use another approach.",
            )
        entry = offered.get(call.name)
        if entry is None:
            names = ", ".join(sorted(n for n in offered if n not in guards.withheld))
            return self._inline(
                call, "error", f"unknown tool {call.name!r}; the tools you have are: {names}"
            )
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as err:
            return self._inline(
                call, "error", f"arguments are not valid JSON ({err.msg} at {err.pos}); resend"
            )
        if not isinstance(arguments, dict):
            return self._inline(call, "error", "arguments must be a JSON object")
        seen = guards.repeats.get((call.name, _canonical_arguments(call.arguments)), {})
        if seen and max(seen.values()) >= self._spec.limits.repeat_call_threshold:
            result = self._inline(
                call,
                "refused",
                f"refused: you called {call.name} with these arguments "
                f"{max(seen.values())} times and got the same result each time. "
                "Change approach instead of repeating the call.",
            )
            result.counts_as_failure = False
            result.repeat_refusal = True
            return result
        refusal = await self._authorize(call, entry, arguments)
        if refusal is not None:
            return refusal
        self._check_abort()
        if entry.name == "ask_question":
            return await self._ask(call, arguments)
        if entry.name == "delegate":
            return await self._delegate(turn, call, arguments)
        self._open_calls[call.id] = (turn, call.name)
        interruptible = self._interruptible_tool(call.name)
        task = asyncio.create_task(self._execute(turn, call, entry, arguments))
        if interruptible:
            self._interruptible[call.id] = task
        try:
            result = await task
        except asyncio.CancelledError:
            if self._abort is None or not task.cancelled():
                raise
            result = self._inline(call, "aborted", ABORTED_CALL)
            result.counts_as_failure = False
        finally:
            self._open_calls.pop(call.id, None)
            self._interruptible.pop(call.id, None)
        if result.outcome is not None and result.outcome.status == "wait":
            return await self._external(call, result.outcome)
        return result

    def _interruptible_tool(self, name: str) -> bool:
        tool = self._tools.get(name)
        return tool.interruptible if tool is not None else True

    async def _authorize(
        self, call: ToolCallRequest, entry: CatalogEntry, arguments: dict[str, Any]
    ) -> _ToolResult | None:
        """The Policy's word on this call: None to run it, else the result the model sees."""
        decision = entry.policy
        if decision is None:
            decision = await workflow.execute_activity(
                POLICY_DECIDE,
                PolicyInput(
                    run_id=self._input.run_id,
                    call_id=call.id,
                    tool=entry.info,
                    arguments=arguments,
                    scope=self._input.scope,
                ),
                result_type=PolicyDecision,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=SAFE_TOOL_RETRY,
                summary=f"policy for {call.name}",
            )
        if decision.decision == "deny":
            why = f": {decision.reason}" if decision.reason else ""
            result = self._inline(call, "denied", f"The policy does not allow this call{why}.")
            result.counts_as_failure = False  # a denial is not the tool failing
            return result
        if decision.decision == "allow":
            return None
        seconds = self._spec.suspension.approval_expires_seconds
        answer = await self._suspend(
            Pending(
                reason="approval",
                id=call.id,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                expires_at=self._expires_at(seconds),
            ),
            seconds,
        )
        if answer.approved:
            return None
        note = f" Their note: {answer.note}" if answer.note else ""
        result = self._inline(call, "rejected", f"An approver rejected this call.{note}")
        result.counts_as_failure = False
        return result

    async def _ask(self, call: ToolCallRequest, arguments: dict[str, Any]) -> _ToolResult:
        seconds = self._spec.suspension.question_expires_seconds
        answer = await self._suspend(
            Pending(
                reason="question",
                id=call.id,
                call_id=call.id,
                tool=call.name,
                question=str(arguments.get("question", "")),
                expires_at=self._expires_at(seconds),
            ),
            seconds,
        )
        return self._inline(call, "ok", answer.answer or "")

    async def _delegate(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> _ToolResult:
        """Run a subagent as a child AgentRun; the parent is suspended (children) meanwhile.

        The child's tools are its own narrowed to the parent's; its Version is hashed here
        (deterministically) and travels whole, so a replayed parent starts the same child.
        """
        spec = self._spec
        limits = spec.limits
        name = str(arguments.get("agent", ""))
        sub = next((s for s in spec.subagents if s.name == name), None)
        if sub is None:
            known = ", ".join(s.name for s in spec.subagents)
            return self._inline(call, "error", f"no subagent named {name!r}; you have: {known}")
        depth = self._input.depth + 1
        if depth > limits.max_delegation_depth:
            return self._inline(
                call,
                "error",
                f"delegation depth {depth} would exceed max_delegation_depth "
                f"({limits.max_delegation_depth}); do the task yourself",
            )
        started = self._delegations.get(turn, 0)
        if started >= limits.max_fanout_per_turn:
            return self._inline(
                call,
                "error",
                f"not run: more than max_fanout_per_turn ({limits.max_fanout_per_turn}) "
                "delegations in one turn",
            )
        self._delegations[turn] = started + 1
        parent_tools = [t.name for t in spec.tools]
        allowed = set(narrow([t.name for t in sub.spec.tools], permitted=parent_tools))
        child_spec = sub.spec.model_copy(
            update={"tools": tuple(t for t in sub.spec.tools if t.name in allowed)}
        )
        version = Version(
            hash=version_hash(child_spec), spec=child_spec, published_at=workflow.now()
        )
        index = sum(self._delegations.values())
        child = await self._start_run(
            f"{self._input.run_id}-sub{index}",
            version,
            str(arguments.get("task", "")),
            depth=depth,
            summary=f"subagent {name} of {self._input.run_id}",
        )
        workflow_id = child.id
        seconds = spec.suspension.children_expires_seconds
        item = Pending(
            reason="children",
            id=workflow_id,
            call_id=call.id,
            tool="delegate",
            arguments=call.arguments,
            expires_at=self._expires_at(seconds),
        )
        try:
            await self._hold(
                _Wait(item), child.done, seconds, f"subagent {workflow_id} did not finish"
            )
        except _Stop:
            child.cancel()
            raise
        try:
            result: RunResult = child.result()
        except ChildWorkflowError as err:
            return self._inline(
                call, "error", f"subagent {name} ({workflow_id}) failed: {_cause(err)}"
            )
        if result.status is RunStatus.COMPLETED:
            return self._inline(call, "ok", result.answer or "")
        return self._inline(
            call,
            "error",
            f"subagent {name} ({workflow_id}) ended {result.status.value}: {result.reason}",
        )

    async def _external(self, call: ToolCallRequest, outcome: ToolOutcome) -> _ToolResult:
        token = outcome.wait_token or call.id
        if token in self._pending:
            return self._inline(call, "error", f"another call already waits on token {token!r}")
        seconds = self._spec.suspension.external_expires_seconds
        answer = await self._suspend(
            Pending(
                reason="external",
                id=token,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                question=outcome.content,
                expires_at=self._expires_at(seconds),
            ),
            seconds,
        )
        payload = answer.payload
        return self._inline(
            call, "ok", payload if isinstance(payload, str) else json.dumps(payload)
        )

    async def _execute(
        self, turn: int, call: ToolCallRequest, entry: CatalogEntry, arguments: dict[str, Any]
    ) -> _ToolResult:
        spec = self._spec
        large = spec.limits.large_result_bytes
        scope = self._input.scope
        run_id = self._input.run_id
        if entry.name == "load_skill":
            name = str(arguments.get("name", ""))
            skill = next((s for s in spec.skills if s.name == name), None)
            if skill is None:
                known = ", ".join(s.name for s in spec.skills)
                return self._inline(
                    call, "ok", f"There is no skill named {name!r}. Skills you have: {known}."
                )
            return self._inline(call, "ok", skill.body)
        summary = f"tool {call.name}, turn {turn}"
        retry = SAFE_TOOL_RETRY if entry.safe_to_repeat else ONCE
        try:
            if entry.name == "read_tool_output":
                read = _read_arguments(call.id, arguments)
                if isinstance(read, str):
                    return self._inline(call, "error", read)
                outcome = await workflow.execute_activity(
                    TOOL_READ_OUTPUT,
                    read,
                    result_type=ToolOutcome,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=SAFE_TOOL_RETRY,
                    summary=summary,
                )
            elif entry.kind == "http":
                tool = self._tools[call.name]
                assert isinstance(tool, HttpTool)
                outcome = await workflow.execute_activity(
                    TOOL_HTTP,
                    HttpToolCall(
                        run_id=run_id,
                        call_id=call.id,
                        tool=tool,
                        arguments=arguments,
                        large_result_bytes=large,
                        scope=scope,
                    ),
                    result_type=ToolOutcome,
                    start_to_close_timeout=timedelta(seconds=tool.timeout_seconds + 30),
                    heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                    retry_policy=retry,
                    summary=summary,
                )
            else:
                outcome = await workflow.execute_activity(
                    TOOL_CODE,
                    CodeToolCall(
                        run_id=run_id,
                        call_id=call.id,
                        tool=call.name,
                        arguments=arguments,
                        large_result_bytes=large,
                        scope=scope,
                    ),
                    result_type=ToolOutcome,
                    start_to_close_timeout=CODE_TOOL_TIMEOUT,
                    heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                    retry_policy=retry,
                    summary=summary,
                )
        except ActivityError as err:
            if _was_cancelled(err):
                if self._abort is None:
                    raise asyncio.CancelledError from err
                result = self._inline(call, "aborted", ABORTED_CALL)
                result.counts_as_failure = False
                return result
            if not entry.safe_to_repeat and isinstance(err.__cause__, TemporalTimeoutError):
                result = self._inline(call, "unknown", UNKNOWN_OUTCOME)
                result.counts_as_failure = False
                return result
            return self._inline(call, "error", f"the tool call failed: {_cause(err)}")
        return _ToolResult(
            call=call,
            status=outcome.status,
            message=outcome.message_ref,
            content=outcome.content,
            outcome=outcome,
            counts_as_failure=outcome.status == "error",
        )

    def _after_tool(self, turn: int, result: _ToolResult, notes: list[ChatMessage | str]) -> None:
        """Record one finished call and update the guards, in call order."""
        limits = self._spec.limits
        guards = self._guards
        call = result.call
        outcome = result.outcome
        self._record(
            ToolCallFinished,
            turn=turn,
            call_id=call.id,
            tool=call.name,
            status=result.status,
            content=result.content,
            truncated=outcome.truncated if outcome else False,
            size=outcome.size if outcome else len(result.content.encode()),
            result_ref=outcome.result_ref if outcome else None,
            latency=outcome.latency if outcome else None,
        )
        key = (call.name, _canonical_arguments(call.arguments))
        if result.repeat_refusal:
            seen = guards.repeats[key]
            top = max(seen, key=lambda sig: seen[sig])
            seen[top] += 1
            if seen[top] >= limits.repeat_call_hard_stop:
                raise _Stop(
                    RunStatus.FAILED,
                    f"repeat_call: {call.name} was called {seen[top]} times with the same "
                    "arguments and result",
                )
            return
        if outcome is not None:
            seen = guards.repeats.setdefault(key, {})
            seen[outcome.result_ref] = seen.get(outcome.result_ref, 0) + 1
        if result.status == "ok":
            guards.streaks.pop(call.name, None)
            return
        if not result.counts_as_failure:
            return
        streak = guards.streaks.get(call.name, 0) + 1
        guards.streaks[call.name] = streak
        if streak >= limits.failure_streak_hard_stop:
            raise _Stop(
                RunStatus.FAILED,
                f"failure_streak: {call.name} failed {streak} times in a row",
            )
        if streak >= limits.failure_streak_threshold and call.name not in guards.withheld:
            guards.withheld.append(call.name)
            self._record(ToolWithheld, tool=call.name, failures=streak)
            notes.append(
                ChatMessage(
                    role="user",
                    content=(
                        f"[runtime] The tool {call.name} failed {streak} times in a row and is "
                        "withheld for the rest of this Run. Continue without it."
                    ),
                )
            )

    # --- bookkeeping ---------------------------------------------------------------------

    def _record(self, cls: Any, **fields: Any) -> None:
        self._records.append(
            cls(seq=len(self._records) + 1, at=workflow.now(), scope=self._input.scope, **fields)
        )

    def _count(self, **increments: int) -> None:
        totals = self._totals
        self._totals = totals.model_copy(
            update={name: getattr(totals, name) + value for name, value in increments.items()}
        )

    def _add_usage(self, usage: Usage, cost: float | None) -> None:
        totals = self._totals
        summed = Usage(
            **{
                name: getattr(totals.usage, name) + getattr(usage, name)
                for name in Usage.model_fields
            }
        )
        if cost is None:
            self._cost_unknown = True
        new_cost = None if self._cost_unknown else (totals.cost or 0.0) + (cost or 0.0)
        self._totals = totals.model_copy(update={"usage": summed, "cost": new_cost})


READ_MAX_LENGTH = 65536


def _read_arguments(call_id: str, arguments: dict[str, Any]) -> ReadOutputInput | str:
    """``read_tool_output``'s arguments, or the error the model should read."""
    handle, offset, length = (
        arguments.get("handle"),
        arguments.get("offset", 0),
        arguments.get("length", 8192),
    )
    if not isinstance(handle, str) or not handle:
        return "read_tool_output needs a handle (the text after 'handle' in the preview)"
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return f"offset must be a whole number >= 0, not {offset!r}"
    if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= READ_MAX_LENGTH:
        return f"length must be a whole number from 1 to {READ_MAX_LENGTH}, not {length!r}"
    return ReadOutputInput(call_id=call_id, handle=handle, offset=offset, length=length)


def _as_signal(name: str, action: Callable[[Any], object], input: Any) -> None:
    """Run an update's action for its signal twin: a signal cannot answer, so a refusal
    is logged and the signal ignored."""
    try:
        action(input)
    except ApplicationError as err:
        workflow.logger.warning("%s signal ignored: %s", name, err)


def _was_cancelled(err: ActivityError) -> bool:
    return isinstance(err.__cause__, CancelledError)


def _canonical_arguments(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return raw


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    while cause is not None and cause.__cause__ is not None and not str(cause):
        cause = cause.__cause__
    return str(cause or err)


def _model_failure(err: ActivityError) -> ModelFailure:
    """Turn an activity failure into a ModelFailure (worker loss and timeouts are transient)."""
    cause = err.__cause__
    if isinstance(cause, ApplicationError) and cause.type == "ModelCallFailed" and cause.details:
        return ModelFailure.model_validate(cause.details[0])
    if isinstance(cause, TemporalTimeoutError):
        return ModelFailure(
            transient=True,
            message=f"model call timed out ({cause.type.name if cause.type else 'timeout'})",
        )
    return ModelFailure(transient=True, message=f"model call failed: {_cause(err)}")
