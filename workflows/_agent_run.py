"""AgentRun: the durable turn loop of one agent Run.

A Turn is one model-call activity, then the turn's tool calls run concurrently with their
results taken in call order (``_tool_calls.py``), until a stop condition (see SEMANTICS
"The turn loop", "Limits"). Everything else a Run has (records, status, deadline,
suspensions, the contract's handlers) is the kernel in ``_run_base.py``. Model retries are
the workflow's: a transient failure costs one unit of the Run's budget and the next attempt
goes where ``_model_calls.ready_model`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ChatMessage,
        ErrorType,
        ModelCallInput,
        ModelCallResult,
        ThreadContext,
    )
    from psych_runtime.specs import AgentSpec, WorkflowSpec, system_prompt
    from psych_runtime.workflows import _activity_calls as calls
    from psych_runtime.workflows import _continue as continuing
    from psych_runtime.workflows._carry import CompactionState
    from psych_runtime.workflows._catalog import resolve
    from psych_runtime.workflows._compaction import after_call, compact_at_boundary
    from psych_runtime.workflows._contract import AGENT_RUN, AgentRunInput, RunResult
    from psych_runtime.workflows._handlers import parse_input
    from psych_runtime.workflows._mcp import take_turn, turn_input
    from psych_runtime.workflows._model_calls import (
        budget_left,
        model_failure,
        ready_model,
        retry_delay,
    )
    from psych_runtime.workflows._outcome import Outcome, Stop
    from psych_runtime.workflows._records import (
        ContextProvided,
        ModelCallFailed,
        ModelCallFinished,
        ModelCallStarted,
        RunAdmitted,
        RunContinued,
        RunStatus,
        TurnStarted,
    )
    from psych_runtime.workflows._run_base import cause_text
    from psych_runtime.workflows._tasks import prompt_with_tasks
    from psych_runtime.workflows._tool_calls import ToolCalls


@workflow.defn(name=AGENT_RUN)
class AgentRun(ToolCalls):
    """One agent Run (see the module docstring)."""

    KIND: ClassVar[str] = "agent"

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # Untyped so that a start with no argument or two fails the Run, not every task.
        super().__init__(parse_input(args, AgentRunInput))
        self._system_prompt = ""
        self._budget = 0
        self._not_before: dict[str, float] = {}
        self._model_failures: dict[str, int] = {}
        self._model_task: asyncio.Task[Any] | None = None
        self._compaction = CompactionState()
        """Compaction's per-Run state (``_compaction.py``); unused without ``compaction``."""
        self._thread: ThreadContext | None = None
        """The earlier conversation the first model call puts first (a threaded Run)."""

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        """Run the turn loop to a settled state."""
        return await self._run()

    def _admit(self, spec: AgentSpec | WorkflowSpec) -> None:
        assert isinstance(spec, AgentSpec)
        self._take_spec(spec)
        self._system_prompt = system_prompt(spec)
        self._budget = spec.limits.transient_retry_budget
        bounds = self._input.bounds
        if bounds is not None and bounds.transient_retry_budget is not None:
            self._budget = min(self._budget, bounds.transient_retry_budget)
        carry = self._input.carry
        if carry is not None:
            # Continue-as-new: the Run was admitted by its first execution; this one takes
            # the carried state and says where it came from instead.
            continuing.restore(self, carry)
            self._log.add(
                RunContinued(
                    **self._log.stamp(),
                    previous_run_id=carry.previous_run_id,
                    execution=len(carry.earlier) + 1,
                    history_length=carry.history_length,
                    history_size=carry.history_size,
                    deadline_used=carry.deadline_used,
                )
            )
            return
        self._log.add(
            RunAdmitted(
                **self._log.stamp(),
                version_hash=self._input.version.hash,
                agent=spec.name,
                messages=self._input.messages,
                system_prompt=self._system_prompt,
                thread=self._input.thread,
                left_out=bounds.left_out if bounds is not None else (),
            )
        )
        thread = self._input.thread
        if thread is not None and spec.limits.max_history_records > 0:
            self._thread = ThreadContext(
                head=thread.head, max_messages=spec.limits.max_history_records
            )

    def _working(self) -> int:
        return 0 if self._model_task is None else 1

    def _aborting(self) -> None:
        if self._model_task is not None:
            self._model_task.cancel()

    async def _body(self) -> Outcome:
        run = self._input
        with self._trace.run(
            kind=self.KIND,
            name=self._spec.name,
            run_id=run.run_id,
            tenant=run.scope.tenant,
            version=run.version.hash,
        ):
            return self._trace.settled(await self._turns())

    async def _turns(self) -> Outcome:
        spec = self._spec
        assert isinstance(spec, AgentSpec)
        limits = spec.limits
        catalog = await resolve(self)
        base = {entry.name: entry for entry in catalog.entries}
        pending: list[ChatMessage | str] = [
            ChatMessage(role="user", content=text) for text in self._input.messages
        ]
        context_ref: str | None = None
        system_ref: str | None = None
        prompt_revision = 0  # of the task list the Run's system prompt shows
        carry = self._input.carry
        if carry is not None:
            pending = list(carry.pending)
            context_ref, system_ref = carry.context_ref, carry.system_ref
        # How many of the next call's first messages are the turn before's (compaction's
        # marks): none for the user's input, the carried results after a continue-as-new.
        before = len(pending) if carry is not None else 0
        while True:
            self._check_abort()
            if self._past_deadline():
                return self._deadline_outcome()
            if self._turn >= limits.max_turns:
                return Outcome(RunStatus.STOPPED, f"max_turns: {limits.max_turns} turns taken")
            if self._totals.steps >= limits.max_steps:
                return Outcome(RunStatus.STOPPED, f"max_steps: {limits.max_steps} steps taken")
            # A turn boundary: a long Run continues as new here once nothing is open.
            open_now = len(self._open_calls) + len(self._children) + len(self._suspensions.items())
            if continuing.due(
                self._input.continue_after_events, self._turn, carry, in_flight=open_now
            ):
                await continuing.continue_as_new(self, pending, context_ref, system_ref)
            if spec.compaction is not None:
                context_ref = await compact_at_boundary(self, context_ref)
            self._turn += 1
            turn = self._turn
            self._totals = self._totals.model_copy(update={"turns": turn})
            self._log.add(TurnStarted(**self._log.stamp(), turn=turn))
            self._trace.turn(turn)
            pending += _take(self._steer)
            if self._tasks.revision != prompt_revision:
                # The task list changed: this call sends the new prompt inline (a new ref).
                prompt_revision = self._tasks.revision
                self._system_prompt = prompt_with_tasks(spec, self._tasks)
                system_ref = None
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
                    # MCP tools are resolved at every turn boundary, inside the model call,
                    # and fixed within the turn.
                    mcp=turn_input(self._mcp),
                    thread=self._thread if context_ref is None else None,
                ),
            )
            if result.mcp is not None:
                take_turn(self._mcp, result.mcp, turn=turn, log=self._log)
            if result.context is not None:
                self._log.add(ContextProvided.of(turn, result.context, **self._log.stamp()))
            context_ref, system_ref = result.context_ref, result.system_ref
            self._conversation_ref = context_ref
            if spec.compaction is not None:
                self._compaction = after_call(self._compaction, context_ref, before, result.usage)
            pending = []
            before = 0
            self._check_abort()
            if not result.tool_calls:
                # Input that arrived for this turn, or for after it, continues the Run.
                pending = _take(self._steer) + _take(self._follow_up)
                if not pending:
                    return Outcome(RunStatus.COMPLETED, "answered", answer=result.text)
                continue
            if self._past_deadline():
                return self._deadline_outcome()
            offered = base | self._mcp.entries if self._mcp.entries else base
            results, notes = await self._run_tools(turn, result.tool_calls, offered)
            pending = [r.message for r in results] + notes
            before = len(pending)
            self._check_abort()

    async def _call_model(self, turn: int, call: ModelCallInput) -> ModelCallResult:
        spec = self._spec
        assert isinstance(spec, AgentSpec)
        models = [spec.model.model, *spec.model.fallbacks]
        index = 0
        attempt = 0
        while True:
            model = ready_model(models, index, self._not_before, workflow.time())
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
                raise Stop(outcome.status, outcome.reason)
            attempt += 1
            self._log.add(
                ModelCallStarted(**self._log.stamp(), turn=turn, model=model, attempt=attempt)
            )
            self._count(steps=1, model_calls=1)
            self._model_task = asyncio.create_task(
                calls.complete(call.model_copy(update={"model": model}), turn=turn)
            )
            try:
                result: ModelCallResult = await self._model_task
            except asyncio.CancelledError:
                if self._abort is None:
                    raise
                raise Stop(RunStatus.ABORTED, self._abort_reason()) from None
            except ActivityError as err:
                self._model_task = None
                self._check_abort()
                if isinstance(err.__cause__, CancelledError):
                    # The workflow is being cancelled (or force-settled): not a model failure.
                    raise asyncio.CancelledError from err
                if isinstance(err.__cause__, ApplicationError) and (
                    err.__cause__.type == ErrorType.MCP_UNREACHABLE
                ):
                    # No model call was made: a required MCP server did not answer.
                    raise Stop(RunStatus.FAILED, err.__cause__.message) from err
                failure = model_failure(err, cause_text(err))
                left = budget_left(self._budget, self._totals.transient_failures, failure)
                self._log.add(
                    ModelCallFailed(
                        **self._log.stamp(),
                        turn=turn,
                        model=model,
                        transient=failure.transient,
                        status=failure.status,
                        retry_after=failure.retry_after,
                        message=failure.message,
                        budget_left=max(left, 0),
                    )
                )
                if not failure.transient:
                    raise Stop(RunStatus.FAILED, f"model_error: {failure.message}") from err
                self._count(transient_failures=1)
                if left < 0:
                    raise Stop(
                        RunStatus.FAILED,
                        f"transient_retry_budget exhausted: {self._budget} retries spent; "
                        f"last failure: {failure.message}",
                    ) from err
                failures = self._model_failures.get(model, 0) + 1
                self._model_failures[model] = failures
                self._not_before[model] = workflow.time() + retry_delay(failure, failures)
                index += 1
                continue
            self._model_task = None
            self._model_failures.pop(result.model, None)
            self._log.add(
                ModelCallFinished(
                    **self._log.stamp(),
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
            )
            self._add_usage(result.usage, result.cost)
            return result


def _take(queue: list[str]) -> list[ChatMessage | str]:
    messages: list[ChatMessage | str] = [ChatMessage(role="user", content=m) for m in queue]
    queue.clear()
    return messages
