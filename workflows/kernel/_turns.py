"""The turn loop: an agent Run's turns, its model calls and their retries.

A Turn is one model-call activity, then the turn's tool calls run concurrently with their
results taken in call order (``_tool_calls.py``), until a stop condition (see SEMANTICS
"The turn loop", "Limits"). Everything else a Run has (records, status, deadline,
suspensions, the contract's handlers) is in ``_run_base.py`` and ``_handlers.py``. Model
retries are the workflow's: a transient failure costs one unit of the Run's budget and the
next attempt goes where ``_model_calls.ready_model`` says; every attempt is a step, so none
is made once ``max_steps`` is used up (the Run stops, as at a turn boundary).

The features take part through their hooks, in ``FEATURES`` order: at admission, at each
turn boundary (before the turn starts), into each model call and after it, and in what a
continued execution carries (``_continue.py`` holds the mechanism; ``carry_of`` and
``restore`` here fill and read the carry).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ChatMessage,
        ErrorType,
        ModelCallInput,
        ModelCallResult,
    )
    from psych_runtime.specs import AgentSpec, WorkflowSpec, system_prompt
    from psych_runtime.workflows.contract._carry import RunCarry
    from psych_runtime.workflows.contract._contract import RunInput
    from psych_runtime.workflows.contract._records import (
        ModelCallFailed,
        ModelCallFinished,
        ModelCallStarted,
        RunAdmitted,
        RunStatus,
        TurnStarted,
        Undelivered,
    )
    from psych_runtime.workflows.contract._status import CUT_HINT, CUT_SHORT
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel import _continue as continuing
    from psych_runtime.workflows.kernel._catalog import resolve
    from psych_runtime.workflows.kernel._consent import consent_of
    from psych_runtime.workflows.kernel._feature import CallDone
    from psych_runtime.workflows.kernel._model_calls import (
        budget_left,
        model_failure,
        paid_answer,
        ready_model,
        retry_delay,
    )
    from psych_runtime.workflows.kernel._outcome import Outcome, Stop
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_batch import ToolBatches


class TurnLoop(ToolBatches):
    """An agent Run's kernel: the turn loop on the tool-call pipeline (see the module
    docstring); ``AgentRun`` is the workflow that runs it."""

    def __init__(self, input: RunInput | str) -> None:
        super().__init__(input)
        self._system_prompt = ""
        self._budget = 0
        self._not_before: dict[str, float] = {}
        self._model_failures: dict[str, int] = {}
        self._long_enough = False
        """Whether the execution's history was long enough to continue as new where the
        last model call answered (``continuing.long_enough``)."""

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
            self._restore(carry)
            continuing.record_continued(self._log, carry)
            return
        self._log.add(
            RunAdmitted(
                **self._log.stamp(),
                version_hash=self._input.version.hash,
                agent=spec.name,
                messages=self._input.messages,
                system_prompt=self._system_prompt,
                thread=self._input.thread,
                thread_bound=(
                    self._limits.max_history_records if self._input.thread is not None else None
                ),
                left_out=bounds.left_out if bounds is not None else (),
            )
        )

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
        limits = self._limits  # the Spec's, narrowed by a parent workflow's bounds
        catalog = await resolve(self)
        self._base_tools_ref = catalog.tools_ref
        base = {entry.name: entry for entry in catalog.entries}
        pending: list[ChatMessage | str] = [
            ChatMessage(role="user", content=text) for text in self._input.messages
        ]
        system_ref: str | None = None
        carry = self._input.carry
        if carry is not None:
            pending = list(carry.pending)
            system_ref = carry.system_ref
        # How many of the next call's first messages are the turn before's (compaction's
        # marks): none for the user's input, the carried results after a continue-as-new
        # (not the input taken after an answer, which ends them: it is the next turn's).
        before = len(pending) - len(carry.unanswered) if carry is not None else 0
        while True:
            self.check_abort()
            spent = self._spent()
            if spent is not None:
                return spent
            # A turn boundary: a long Run continues as new here once nothing is open.
            open_now = len(self._open_calls) + len(self._children) + len(self._suspensions.items())
            open_now += sum(feature.open_items() for feature in self._open_items)
            if continuing.due(
                self._input.continue_after_events,
                self._turn,
                carry,
                in_flight=open_now,
                read=self._long_enough if self._start.local_safe else None,
            ):
                await self._continue_as_new(pending, system_ref)
            for feature in self._at_boundary:
                await feature.boundary()
            self._turn += 1
            turn = self._turn
            self._totals = self._totals.model_copy(update={"turns": turn})
            self._log.add(TurnStarted(**self._log.stamp(), turn=turn))
            self._trace.turn(turn)
            pending += self._take("steer")
            call = ModelCallInput(
                run_id=self._input.run_id,
                turn=turn,
                model=spec.model.model,
                params=spec.model,
                system_prompt=self._system_prompt if system_ref is None else None,
                system_ref=system_ref,
                context_ref=self._context_ref,
                new_messages=tuple(pending),
                tools_ref=catalog.tools_ref,
                exclude_tools=tuple(dict.fromkeys([*self._guards.withheld, *self._revoked])),
                stream_idle_seconds=limits.stream_idle_seconds,
                scope=self._input.scope,
            )
            for feature in self._into_call:
                call = feature.into_call(call)
            result = await self._call_model(turn, call)
            self._unanswered.clear()  # delivered: a model answered them
            if self._start.local_safe:
                self._long_enough = continuing.long_enough(self._input.continue_after_events)
            system_ref = result.system_ref
            self._context_ref = result.context_ref
            if self._after_call:
                done = CallDone(turn=turn, call=call, result=result, carried=before)
                for feature in self._after_call:
                    feature.after_call(done)
            pending = []
            before = 0
            self.check_abort()
            if not result.tool_calls:
                # Input that arrived for this turn, or for after it, continues the Run.
                pending = self._take("steer") + self._take("follow_up")
                if not pending:
                    return Outcome(RunStatus.COMPLETED, _answered(result), answer=result.text)
                spent = self._spent()
                if spent is not None:
                    # No turn is left for the input: the Run stops here, as it would at
                    # the next boundary, keeping this answer (the input is undelivered).
                    spent.answer = result.text
                    spent.reason += _kept_cut(result)
                    return spent
                continue
            if self._past_deadline():
                return self._deadline_outcome()
            offered = base
            for feature in self._offering:
                more = feature.offered()
                if more:
                    offered = {**offered, **more}
            results, notes = await self._run_tools(turn, result.tool_calls, offered)
            pending = [r.message for r in results] + notes
            before = len(pending)
            self.check_abort()

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
            self.check_abort()
            if self._past_deadline():
                # The grace period is for calls already in flight, not for new attempts.
                outcome = self._deadline_outcome()
                raise Stop(outcome.status, outcome.reason)
            attempt += 1
            self._log.add(
                ModelCallStarted(**self._log.stamp(), turn=turn, model=model, attempt=attempt)
            )
            self.count(steps=1, model_calls=1)
            self._model_task = asyncio.create_task(
                calls.complete(call.model_copy(update={"model": model}))
            )
            try:
                result: ModelCallResult = await self._model_task
            except asyncio.CancelledError:
                self.cost_unknown()  # cut off mid-call: what the provider billed is unknown
                if self._abort is None:
                    raise
                raise Stop(RunStatus.ABORTED, self.abort_reason()) from None
            except ActivityError as err:
                self._model_task = None
                if isinstance(err.__cause__, CancelledError):
                    self.cost_unknown()  # as above (a failure the provider answered is known)
                self.check_abort()
                if isinstance(err.__cause__, CancelledError):
                    # The workflow is being cancelled (or force-settled): not a model failure.
                    raise asyncio.CancelledError from err
                consent = consent_of(err)
                if consent is not None:
                    # No model call was made: the turn's MCP discovery needs a person's
                    # consent. Asked again (same model) once it came.
                    self._uncount()
                    refused = await self.await_consent(consent, f"turn-{turn}")
                    if refused is not None:
                        if not self._optional_server(consent.server):
                            # The turn's tools cannot be offered without a required server's.
                            raise Stop(RunStatus.FAILED, refused) from err
                        # Left out of this attempt, and of every turn from now on (the MCP
                        # feature's ``into_call``); the model is told, as of an optional
                        # server found unavailable. The workflow derives the answer's
                        # conversation head from the attempt's messages (``expected_refs``),
                        # so a Run recorded before the note, sent none, is given none on
                        # replay. Asked only where such a refusal arrives.
                        noted = workflow.patched("psych-consent-refused-note")
                        call = _without_server(call, consent.server, refused if noted else None)
                    continue
                if isinstance(err.__cause__, ApplicationError) and (
                    err.__cause__.type == ErrorType.MCP_UNREACHABLE
                ):
                    # No model call was made: a required MCP server did not answer.
                    self._uncount()
                    raise Stop(RunStatus.FAILED, err.__cause__.message) from err
                failure = model_failure(err, cause_text(err))
                paid = paid_answer(err)
                if paid is not None:  # the model answered (billed) before the call failed
                    self.add_usage(paid.usage, paid.cost)
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
                        usage=None if paid is None else paid.usage,
                        cost=None if paid is None else paid.cost,
                    )
                )
                if not failure.transient:
                    raise Stop(RunStatus.FAILED, f"model_error: {failure.message}") from err
                self.count(transient_failures=1)
                if left < 0:
                    raise Stop(
                        RunStatus.FAILED,
                        f"transient_retry_budget exhausted: {self._budget} retries spent; "
                        f"last failure: {failure.message}",
                    ) from err
                if self._totals.steps >= self._limits.max_steps and workflow.patched(
                    "psych-retries-within-max-steps"
                ):
                    # Every attempt is a model call, so a step: a retry past max_steps is not
                    # made (before, only turn boundaries were checked and retries went past).
                    raise Stop(RunStatus.STOPPED, _steps_taken(self._limits.max_steps)) from err
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
                    context_ref=result.context_ref,
                    system_ref=result.system_ref,
                )
            )
            self.add_usage(result.usage, result.cost)
            return result

    def _spent(self) -> Outcome | None:
        """How the Run stops at a turn boundary when a bound is used up (the deadline,
        ``max_turns``, ``max_steps``, checked in that order), else None."""
        limits = self._limits
        if self._past_deadline():
            return self._deadline_outcome()
        if self._turn >= limits.max_turns:
            return Outcome(RunStatus.STOPPED, f"max_turns: {limits.max_turns} turns taken")
        if self._totals.steps >= limits.max_steps:
            return Outcome(RunStatus.STOPPED, _steps_taken(limits.max_steps))
        return None

    def _uncount(self) -> None:
        """Take back the model call and step counted for an attempt that made no request
        (its MCP discovery stopped it first). Asked on that path only, where a model call
        activity (never a local one) has just failed; a Run recorded before counted it."""
        if workflow.patched("psych-uncounted-attempts"):
            self.count(steps=-1, model_calls=-1)

    def _optional_server(self, name: str) -> bool:
        """Whether the Spec's MCP server ``name`` is ``optional`` (the Run goes on without
        it; the MCP feature leaves out one whose consent was refused)."""
        return any(server.name == name and server.optional for server in self._spec.mcp_servers)

    def _take(self, mode: Literal["steer", "follow_up"]) -> list[ChatMessage | str]:
        """The ``mode`` queue's messages, for the next model call: unanswered until a call
        answers (``RunBase._undelivered``)."""
        queue = self._steer if mode == "steer" else self._follow_up
        self._unanswered += (Undelivered(mode=mode, message=m) for m in queue)
        messages: list[ChatMessage | str] = [ChatMessage(role="user", content=m) for m in queue]
        queue.clear()
        return messages

    # --- continue-as-new (the mechanism is ``_continue.py``) --------------------------------

    async def _continue_as_new(
        self, pending: list[ChatMessage | str], system_ref: str | None
    ) -> NoReturn:
        """Continue as a new execution carrying the Run's state (raises, never returns)."""
        # Handlers (updates, signals) finish first, and the carry is taken with no await
        # after it, so a steer that arrives now is carried, not dropped.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.check_abort()
        carry = self._carry_of(pending, system_ref)
        workflow.continue_as_new(self._input.model_copy(update={"carry": carry}))

    def _carry_of(self, pending: list[ChatMessage | str], system_ref: str | None) -> RunCarry:
        """The carry at this turn boundary: the kernel's state, then each feature's."""
        return RunCarry(
            **continuing.chain_fields(self._input.carry, self._log.last_seq),
            turn=self._turn,
            totals=self._totals,
            cost_unknown=self._cost_unknown,
            deadline_used=continuing.deadline_used(*self._clock),
            not_before=dict(self._not_before),
            model_failures=dict(self._model_failures),
            guards=continuing.guards_carry(self._guards),
            steer=tuple(self._steer),
            follow_up=tuple(self._follow_up),
            next_run=tuple(self._next_run),
            pending=tuple(pending),
            unanswered=tuple(self._unanswered),
            context_ref=self._context_ref,
            system_ref=system_ref,
            actions=self._kept.carry(),
            features=continuing.features_carry(self._features),
            consents_refused=dict(self._suspensions.consents_refused),
        )

    def _restore(self, carry: RunCarry) -> None:
        """Put ``carry`` back (the Spec taken and the features admitted already)."""
        self._turn = carry.turn
        self._totals = carry.totals
        self._cost_unknown = carry.cost_unknown
        self._clock = (carry.deadline_used, None)
        self._not_before = dict(carry.not_before)
        self._model_failures = dict(carry.model_failures)
        self._guards = continuing.guards_of(carry.guards)
        self._steer = list(carry.steer)
        self._follow_up = list(carry.follow_up)
        self._next_run = list(carry.next_run)
        self._unanswered = list(carry.unanswered)
        self._context_ref = carry.context_ref
        self._suspensions.consents_refused.update(carry.consents_refused)
        continuing.restore_features(self._features, carry)


CUT_ANSWER = f"answered, {CUT_SHORT} {CUT_HINT}"
"""A Run's reason when its final answer was cut at the model's output limit."""


def _answered(result: ModelCallResult) -> str:
    """The reason of a Run its model's answer completes: a final answer the model cut at its
    output limit (``finish_reason: length``) says so, so a caller does not take a cut text
    for the whole one. Asked only for such an answer (a Run recorded before the patch
    completed as "answered"; history ``answer_cut_off_before_patch``)."""
    if result.finish_reason == "length" and workflow.patched("psych-cut-answer-named"):
        return CUT_ANSWER
    return "answered"


def _kept_cut(result: ModelCallResult) -> str:
    """What a stopped Run's reason adds when the answer it keeps (input waited for a turn
    none was left for) was cut at the model's output limit: that it is cut, as a completed
    Run's reason says. Asked only for such an answer, after the model call's activity (a
    Run recorded before said nothing; history ``answer_cut_off_stopped_before_patch``)."""
    if result.finish_reason == "length" and workflow.patched("psych-cut-answer-stopped-named"):
        return f"; the answer kept was {CUT_SHORT} {CUT_HINT}"
    return ""


def _steps_taken(max_steps: int) -> str:
    return f"max_steps: {max_steps} steps taken"


def _without_server(call: ModelCallInput, name: str, refused: str | None) -> ModelCallInput:
    """``call`` with the optional MCP server ``name`` left out of its turn's discovery, and
    a note telling the model why (``refused``, the refusal's words; None: no note, a Run
    recorded before the note)."""
    if call.mcp is None:
        return call
    servers = tuple(server for server in call.mcp.servers if server.name != name)
    mcp = call.mcp.model_copy(update={"servers": servers}) if servers else None
    if refused is None:
        return call.model_copy(update={"mcp": mcp})
    note = ChatMessage(
        role="user",
        content=f"[runtime] {refused}; the server is optional: the Run goes on without it, "
        "its tools not offered for the rest of the Run.",
    )
    return call.model_copy(update={"mcp": mcp, "new_messages": (*call.new_messages, note)})
