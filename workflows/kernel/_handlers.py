"""The handlers of the workflow contract that every Run kind shares.

``psych.state`` and ``psych.records`` (queries), ``psych.resume``, ``psych.abort`` and
``psych.steer`` (updates with validators, and signals with the same payload for callers
that cannot send updates: a refused signal is logged and ignored, except a steer the Run
cannot take now, which is recorded ``steer_refused``), ``psych.child_pending``
(a child's pending items), and forwarding answers, aborts and steers to running children.
Validators refuse before anything is written, with a ``RefusalKind``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, assert_never

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.specs import DepthCap, Version
    from psych_runtime.workflows.contract._carry import KeptAction
    from psych_runtime.workflows.contract._contract import (
        ABORT,
        CHILD_PENDING,
        QUERY_KEPT_ACTION,
        QUERY_RECORDS,
        QUERY_STATE,
        RESUME,
        STEER,
        AbortInput,
        ChildPending,
        ParentBounds,
        RecordsPage,
        RecordsQuery,
        RefusalKind,
        ResumeInput,
        ResumeResult,
        RunInput,
        RunState,
        SteerInput,
        consent_note_problem,
        name_problem,
        refusal,
        size_problem,
        workflow_id_for,
    )
    from psych_runtime.workflows.contract._records import (
        AbortRequested,
        Pending,
        Resumed,
        SteerReceived,
        SteerRefused,
        SuspensionReason,
    )
    from psych_runtime.workflows.kernel._children import start_child
    from psych_runtime.workflows.kernel._feature import ChildHandle
    from psych_runtime.workflows.kernel._run_base import RunBase


def parse_input(args: Sequence[Any], model: type[RunInput]) -> RunInput | str:
    """The one argument a Run takes, validated as JSON, or what is wrong with the arguments.

    A workflow started by hand (the plain ``temporal`` CLI) may pass none, two, or a
    malformed one; the SDK would fail every workflow task of such a Run forever, so the
    arguments arrive untyped and are checked here, and the Run fails at once instead.
    """
    name = model.__name__
    if len(args) != 1:
        given = "none" if not args else f"{len(args)}"
        return f"the Run takes one argument, an {name} (JSON); it was given {given}"
    try:
        # JSON mode, as the data converter would have decoded it.
        return model.model_validate_json(json.dumps(args[0]))
    except (ValidationError, TypeError, ValueError) as err:
        return f"the Run's argument is not a valid {name}: {err}"


class Handlers(RunBase):
    """RunBase with the contract's handlers (see the module docstring)."""

    # --- queries -------------------------------------------------------------------------

    @workflow.query(name=QUERY_STATE)
    def state(self) -> RunState:
        """The Run's current state."""
        self._check_input()
        return RunState(
            run_id=self._input.run_id,
            tenant=self._input.scope.tenant,
            agent=self._input.version.spec.name,
            version_hash=self._input.version.hash,
            status=self._status,
            reason=self._reason,
            answer=self._answer,
            turn=self._turn,
            last_seq=self._log.last_seq,
            totals=self._totals,
            withheld_tools=tuple(self._guards.withheld),
            withdrawn_tools=self._withdrawn_tools(),
            pending=self._suspensions.items(),
            kind="agent" if self.KIND == "agent" else "workflow",
            step=self._state_step(),
            outputs=self._outputs,
            conversation_ref=self._context_ref,
            **{key: value for f in self._features for key, value in f.run_state().items()},
        )

    def _withdrawn_tools(self) -> tuple[str, ...]:
        """The tools the tenant's permits refuse this execution (``ToolCalls`` knows)."""
        return ()

    @workflow.query(name=QUERY_RECORDS)
    def records(self, query: RecordsQuery) -> RecordsPage:
        """Records with ``seq > query.after`` (see ``RecordLog.page``)."""
        self._check_input()
        return self._log.page(query)

    @workflow.query(name=QUERY_KEPT_ACTION)
    def kept_action(self, update_id: str) -> KeptAction | None:
        """The action this Run (or an execution it continued from) took under
        ``update_id``, with its answer; None if it took none it still keeps."""
        return self._kept.get(update_id)

    # --- resume, abort, steer (updates, and signals for callers without updates) ---------

    def _check_input(self) -> None:
        if self._bad_input is not None:
            raise refusal(RefusalKind.NOT_SUSPENDED, f"the Run failed: {self._bad_input}")

    def _check_caller(self, tenant: str) -> None:
        self._check_input()
        if tenant != self._input.scope.tenant:
            raise refusal(RefusalKind.ACCESS_DENIED, f"tenant {tenant!r} may not act on this Run")
        if self._status.terminal:
            raise refusal(
                RefusalKind.NOT_SUSPENDED,
                f"the Run has settled {self._status.value}: {self._reason}",
            )

    def _earlier(self, input: ResumeInput | AbortInput | SteerInput) -> KeptAction | None:
        """The answer the Run gave this update's id before it continued as new (the same
        request sent again under its key), for the Run's own tenant; None otherwise."""
        if self._bad_input is not None or input.tenant != self._input.scope.tenant:
            return None  # the checks refuse it, as they would have
        return self._kept.earlier()

    @workflow.update(name=RESUME)
    def resume(self, input: ResumeInput) -> ResumeResult:
        """Answer a pending approval, question or external wait (exactly once)."""
        earlier = self._earlier(input)
        if earlier is not None and earlier.answer is not None:
            return earlier.answer
        result = self._resume(input)
        self._kept.keep(result)
        return result

    def _resume(self, input: ResumeInput) -> ResumeResult:
        item = self._check_resume(input)  # again: two updates may pass validation in one task
        # A signal's answer the validator never saw (asked only then: a Run recorded before
        # took it, and on replay takes it again).
        if self._abort_ended(item) and self._abort_refuses_signal(item):
            raise self._suspensions.abort_refusal(input.id)
        match input.reason:
            case SuspensionReason.APPROVAL:
                outcome = "approved" if input.approved else "rejected"
                detail = input.note
            case SuspensionReason.QUESTION:
                outcome, detail = "answered", input.answer
            case SuspensionReason.EXTERNAL:
                outcome, detail = "completed", json.dumps(input.payload)
            case SuspensionReason.AUTHORIZATION if input.approved is False:
                # The authorization server refused (the callback's note names its error).
                outcome, detail = "rejected", input.note
            case SuspensionReason.AUTHORIZATION:
                # The callback left the code in the token store, never here.
                outcome, detail = "authorized", None
            case _:
                assert_never(input.reason)
        child = self._suspensions.child_of(item) if item.run is not None else None
        if child is not None:
            # A child's item: the child records the answer when the forwarded signal comes.
            # One named by its holder goes on named (a grandchild's, routed by the child);
            # one by id alone goes on as it came, as before holders could be named.
            named = input.run is not None
            self._suspensions.forward(child, item, named=named)
            holder = item.run if named and item.run != child else None
            self.forward(child, RESUME, input.model_copy(update={"run": holder}))
        else:
            self._suspensions.waits[input.id].answer = input
            self._log.add(
                Resumed(
                    **self._log.stamp(),
                    reason=input.reason,
                    id=input.id,
                    by=input.by,
                    outcome=outcome,
                    detail=detail,
                )
            )
        return ResumeResult(reason=input.reason, id=input.id, outcome=outcome)

    @resume.validator
    def _validate_resume(self, input: ResumeInput) -> None:
        earlier = self._earlier(input)
        if earlier is None or earlier.answer is None:
            pending = self._check_resume(input)
            if self._abort_ended(pending):
                raise self._suspensions.abort_refusal(input.id)
            # Here, which replay never runs: a handler refusing what a Run recorded before
            # took would change its history (the signal asks a patch for it).
            if _blank_answer(input, pending):
                raise refusal(RefusalKind.BAD_RESUME, "an answer needs answer text: it is blank")
            _check_consent_note(input)

    def _abort_ended(self, item: Pending) -> bool:
        """Whether the Run's abort ended the wait of ``item``: every wait ends with an abort
        (``Suspensions.hold``), but only once its coroutine runs again, so an answer in the
        abort's own activation (a worker down or busy when both were sent) was told it was
        taken and the call then not run, or run. Refused whenever it comes; a child's item
        too (the abort ends subagents and spawned children; a forwarded answer reached the
        child ahead of the abort or behind it, and an approved call could run)."""
        return self._abort is not None

    def _abort_refuses_signal(self, item: Pending) -> bool:
        """Whether a ``psych.resume`` signal answering ``item`` after the abort is refused
        (the validator refuses the update). Asked only for such a signal: a Run recorded
        before took it, and on replay takes it again; a child's item asks its own patch,
        as a lead took those after ``psych-abort-ends-answers`` too."""
        if item.run is None:
            return workflow.patched("psych-abort-ends-answers")
        return workflow.patched("psych-abort-ends-child-answers")

    def _check_resume(self, input: ResumeInput) -> Pending:
        _check_names(input)  # first: the other refusals quote the tenant and the id
        self._check_caller(input.tenant)
        _check_size(input)
        return self._suspensions.check(input)

    @workflow.signal(name=RESUME)
    def resume_signal(self, input: ResumeInput) -> None:
        """``psych.resume`` as a signal; an invalid one is logged and ignored."""
        _as_signal(RESUME, self._resume_signalled, input)

    def _resume_signalled(self, input: ResumeInput) -> ResumeResult:
        """A signal's resume: as the update's, and a blank answer to the model's question
        is ignored as the update's validator refuses it (the question still waits). A Run
        recorded before took it: patch ``psych-signal-blank-answer``, asked only for one.
        So is a refusal of a consent whose note is over its bound (``consent_note_problem``):
        patch ``psych-consent-note-bounded``, asked only for one."""
        if _blank_answer(input, self._check_resume(input)) and workflow.patched(
            "psych-signal-blank-answer"
        ):
            raise refusal(
                RefusalKind.BAD_RESUME,
                f"an answer to {input.id!r} needs answer text: it is blank (still waiting)",
            )
        if consent_note_problem(input) is not None and workflow.patched(
            "psych-consent-note-bounded"
        ):
            _check_consent_note(input)
        return self._resume(input)

    @workflow.update(name=ABORT)
    def abort(self, input: AbortInput) -> None:
        """Abort the Run: interruptible calls are cancelled, the others finish."""
        if self._earlier(input) is None:
            self._do_abort(input)
            self._kept.keep()

    def _do_abort(self, input: AbortInput) -> None:
        self._check_abort(input)  # again, for the signal, which has no validator
        if self._abort is not None:
            return
        self._abort = input
        self._log.add(AbortRequested(**self._log.stamp(), by=input.by, reason=input.reason))
        for task in self._interruptible.values():
            task.cancel()
        self._aborting()

    @abort.validator
    def _validate_abort(self, input: AbortInput) -> None:
        if self._earlier(input) is None:
            self._check_abort(input)

    def _check_abort(self, input: AbortInput) -> None:
        _check_names(input)
        self._check_caller(input.tenant)
        _check_size(input)

    @workflow.signal(name=ABORT)
    def abort_signal(self, input: AbortInput) -> None:
        """``psych.abort`` as a signal; an invalid one is logged and ignored."""
        _as_signal(ABORT, self._do_abort, input)

    @workflow.update(name=STEER)
    def steer(self, input: SteerInput) -> None:
        """Queue a message: into this turn, after it, or for the next Run."""
        if self._earlier(input) is None:
            self._do_steer(input)
            self._kept.keep()

    def _do_steer(self, input: SteerInput) -> None:
        self._check_steer_input(input)  # again, for the signal, which has no validator
        self._log.add(
            SteerReceived(**self._log.stamp(), mode=input.mode, message=input.message, by=input.by)
        )
        if input.mode == "next_run":
            self._next_run.append(input.message)
        else:
            self._steer_into(input)

    @steer.validator
    def _validate_steer(self, input: SteerInput) -> None:
        if self._earlier(input) is None:
            self._check_steer_input(input)
            if input.mode != "next_run":
                self._check_steer_target(input)

    def _check_steer_target(self, input: SteerInput) -> None:
        """Refuse a steer whose target cannot say whether it takes it; asked by the update's
        validator (which replay never runs, so a refusal added here changes no recorded
        Run) and by the signal, where a refusal is recorded (``steer_refused``) behind the
        patch ``psych-signal-steer-target-refused``."""

    def _check_steer_input(self, input: SteerInput) -> None:
        self._check_steer_sender(input)
        if input.mode != "next_run":
            self._check_steer(input)

    def _check_steer_sender(self, input: SteerInput) -> None:
        _check_names(input)
        self._check_caller(input.tenant)
        _check_size(input)

    @workflow.signal(name=STEER)
    def steer_signal(self, input: SteerInput) -> None:
        """``psych.steer`` as a signal. One the Run's own tenant sent, within the sizes,
        that the Run cannot take now (``NoStep``: the update would have been refused) is
        recorded ``steer_refused``: a signal cannot answer, and the message must not be
        lost unseen. Any other invalid one is logged and ignored (a foreign tenant writes
        nothing into the log)."""
        try:
            self._check_steer_sender(input)
        except ApplicationError as err:
            workflow.logger.warning("%s signal ignored: %s", STEER, err)
            return
        if input.mode != "next_run":
            try:
                self._check_steer(input)
            except ApplicationError as err:
                # A Run recorded before only logged it: on replay its record log (and every
                # later seq) stays as its followers read it.
                if self.patched("psych-signal-steer-target-refused"):
                    self._steer_refused(input, err)
                else:
                    workflow.logger.warning("%s signal ignored: %s", STEER, err)
                return
            try:
                self._check_steer_target(input)
            except ApplicationError as err:
                # A Run recorded before took it and forwarded it (a nested workflow in a
                # tool step refused it there, and it was lost): it does so on replay.
                if self.patched("psych-signal-steer-target-refused"):
                    self._steer_refused(input, err)
                    return
        self._do_steer(input)

    def _steer_refused(self, input: SteerInput, err: ApplicationError) -> None:
        assert input.mode != "next_run"
        self._log.add(
            SteerRefused(
                **self._log.stamp(),
                mode=input.mode,
                message=input.message,
                by=input.by,
                refusal=err.type or "",
                reason=err.message,
            )
        )

    @workflow.signal(name=CHILD_PENDING)
    def child_pending(self, input: ChildPending) -> None:
        """A child Run's pending items changed: mirror them (a finished child's are dropped)."""
        known = input.run in self._children or input.run in self._starting
        # A report older than one taken (signals of one task may arrive in either order)
        # is not. Its status shown again, a nested workflow passes the report on up.
        if (
            self._bad_input is None
            and known
            and self._suspensions.newer_report(input.run, input.seq)
        ):
            self._suspensions.set_child(input.run, input.pending, input.working)

    async def start_reporting_child(
        self,
        run_id: str,
        version: Version,
        messages: tuple[str, ...],
        *,
        summary: str,
        bounds: ParentBounds,
        depth: int | None = None,
        depth_caps: tuple[DepthCap, ...] | None = None,
    ) -> ChildHandle:
        """Start a child whose pending items are mirrored here and answers forwarded to it."""
        return await self.adopt_child(
            workflow_id_for(self._input.scope.tenant, run_id),
            lambda: start_child(
                self._input.scope,
                run_id,
                version,
                messages,
                depth=self._input.depth + 1 if depth is None else depth,
                summary=summary,
                bounds=bounds,
                depth_caps=self._input.depth_caps if depth_caps is None else depth_caps,
            ),
        )

    async def adopt_child(
        self, workflow_id: str, start: Callable[[], Awaitable[ChildHandle]]
    ) -> ChildHandle:
        """Start a child with ``start`` and keep it as one of this Run's children.

        Its id is known before it starts, so a report it sends in the activation that also
        brings its start (the SDK applies signals first) is taken, not dropped.
        """
        self._starting.add(workflow_id)
        try:
            handle = await start()
        finally:
            self._starting.discard(workflow_id)
        self._children[workflow_id] = handle
        # An agent's deadline clock runs while its subagent or spawned child works (a
        # workflow's runs while a step does: nothing of its own is pending then). Until
        # 12-06 a parent waiting on its child only waited, its clock stopped while the child
        # worked for as long as it liked (an audit). Asked in the task the child's start
        # resolves in (an event, never a local activity's resolution).
        if self.KIND == "agent" and workflow.patched("psych-clock-runs-with-children"):
            self._suspensions.clocked.add(workflow_id)
            self.report_to_parent()
        return handle

    def forget_child(self, run: str) -> None:
        """A child settled (or is being cancelled): stop mirroring and forwarding to it.
        Not called from a ``finally``: see ``Suspensions.hold`` on cancelled coroutines."""
        self._children.pop(run, None)
        if run in self._suspensions.children:
            self._suspensions.set_child(run, ())
        if run in self._suspensions.clocked:
            self._suspensions.clocked.discard(run)
            self.report_to_parent()

    def forward(self, run: str, name: str, payload: Any) -> None:
        """Send a signal to a running child (its handler validates it again)."""
        task = asyncio.create_task(self._children[run].signal(name, payload))
        task.add_done_callback(lambda done: _log_forward_failure(name, run, done))


def _blank_answer(input: ResumeInput, pending: Pending) -> bool:
    """Whether ``input`` answers the model's own question with blank text. The model's only:
    an MCP form's optional field or a peer's question may take a blank answer."""
    asked = input.reason is SuspensionReason.QUESTION and pending.tool == "ask_question"
    return asked and not (input.answer or "").strip()


def _check_names(input: ResumeInput | AbortInput | SteerInput) -> None:
    problem = name_problem(input)
    if problem is not None:
        raise refusal(RefusalKind.TOO_LARGE, problem)


def _check_size(input: ResumeInput | AbortInput | SteerInput) -> None:
    problem = size_problem(input)
    if problem is not None:
        raise refusal(RefusalKind.TOO_LARGE, problem)


def _check_consent_note(input: ResumeInput) -> None:
    problem = consent_note_problem(input)
    if problem is not None:
        raise refusal(RefusalKind.TOO_LARGE, f"{problem} ({input.id!r} still waiting)")


def _as_signal(name: str, action: Callable[[Any], object], input: Any) -> None:
    """Run an update's action for its signal twin: a signal cannot answer, so a refusal
    is logged and the signal ignored."""
    try:
        action(input)
    except ApplicationError as err:
        workflow.logger.warning("%s signal ignored: %s", name, err)


def _log_forward_failure(name: str, run: str, task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        workflow.logger.warning("forwarding %s to %s failed: %s", name, run, task.exception())
