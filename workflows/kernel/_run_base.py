"""What every Run has, AgentRun and WorkflowRun alike.

The typed record log, status and search attributes, the deadline clock, admission checks
and settling, the suspensions and the children it forwards to (the contract's handlers
are in ``_handlers.py``). A Run kind supplies its body (``_body``), what it records at
admission (``_admit``), and how abort and steer reach its running work.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ErrorType, ThreadRef, Usage
    from psych_runtime.specs import (
        AgentSpec,
        Limits,
        Scope,
        WorkflowSpec,
        unsupported_features,
        version_hash,
    )
    from psych_runtime.workflows.contract._carry import KeptAction, Segment
    from psych_runtime.workflows.contract._contract import (
        CANCELLED_REASON,
        SA_SUSPENSION,
        AbortInput,
        RunInput,
        RunResult,
        SteerInput,
        workflow_id_for,
    )
    from psych_runtime.workflows.contract._records import (
        NextRunStarted,
        Pending,
        RunSettled,
        RunStatus,
        ToolCallFinished,
        Totals,
        Undelivered,
    )
    from psych_runtime.workflows.kernel import _deadline as deadline
    from psych_runtime.workflows.kernel._activity_calls import fleet_roles_apart
    from psych_runtime.workflows.kernel._children import (
        STATUS_KEY,
        bounded_limits,
        has_search_attributes,
        report_pending,
        start_child,
        winds_down,
    )
    from psych_runtime.workflows.kernel._feature import Feature
    from psych_runtime.workflows.kernel._guards import Guards
    from psych_runtime.workflows.kernel._kept_actions import KeptActions
    from psych_runtime.workflows.kernel._outcome import Outcome, Stop
    from psych_runtime.workflows.kernel._patches import FEATURE_PATCHES, NOT_ASKED, ask_at_start
    from psych_runtime.workflows.kernel._record_log import RecordLog
    from psych_runtime.workflows.kernel._suspensions import Suspensions

_SUSPENSION_KEY = SearchAttributeKey.for_keyword(SA_SUSPENSION)


class RunBase(abc.ABC):
    """The kernel of a Run (see the module docstring); not a workflow by itself."""

    KIND: ClassVar[str]
    """``agent`` or ``workflow``: the Spec kind this Run kind runs."""
    FEATURES: ClassVar[tuple[type[Feature], ...]] = ()
    """The features a Run of this kind has, in hook (and so command) order."""

    def __init__(self, input: RunInput | str) -> None:
        """Args:
        input: the Run's input, or what is wrong with the arguments it was started
            with (the Run then fails at once, and its handlers refuse).
        """
        self._bad_input: str | None = None
        earlier: tuple[Segment, ...] = ()
        kept: tuple[KeptAction, ...] = ()
        if isinstance(input, str):
            self._bad_input = input
            scope = Scope(tenant="unknown")
        else:
            self._input = input
            scope = input.scope
            # Continue-as-new: the log goes on from the earlier executions' last seq.
            earlier = input.carry.earlier if input.carry is not None else ()
            kept = input.carry.actions if input.carry is not None else ()
        self._kept = KeptActions(kept)
        """Actions sent under an idempotency key, with this chain's answers to them."""
        self._log = RecordLog(scope, earlier)
        self._status = RunStatus.RUNNING
        self._reason: str | None = None
        self._answer: str | None = None
        self._outputs: dict[str, Any] | None = None
        self._held: set[str] = set()
        """Stored results children handed back (``RunView.held``)."""
        self._turn = 0
        self._totals = Totals(cost=0.0)  # nothing spent is a known cost (cost_unknown)
        self._cost_unknown = False
        self._guards = Guards()
        self._limits = Limits()
        self._deadline_hit = False
        self._cancel_reason = CANCELLED_REASON  # why the body is cancelled (see _run)
        self._winding_down: str | None = None  # RunView.winding_down (_children.winds_down)
        self._open_calls: dict[str, tuple[int, str]] = {}
        self._abort: AbortInput | None = None
        self._interruptible: dict[str, asyncio.Task[Any]] = {}
        self._steer: list[str] = []
        self._follow_up: list[str] = []
        self._next_run: list[str] = []
        self._unanswered: list[Undelivered] = []
        """Steer and follow-up messages taken into a model call that has not answered."""
        self._context_ref: str | None = None
        """An agent's conversation head: the chain its next model call continues (a thread
        continues it after the Run)."""
        self._shown_status: tuple[RunStatus, str | None] = (RunStatus.RUNNING, None)
        self._reported: tuple[Pending, ...] = ()
        self._reported_working = False
        self._reports = len(earlier) << 32
        """Reports sent to the parent: from ``execution << 32`` in each execution, so they
        increase across continue-as-new (``ChildPending.seq``)."""
        self._children: dict[str, workflow.ChildWorkflowHandle[Any, RunResult]] = {}
        """Running children that answers and aborts are forwarded to, by workflow id."""
        self._starting: set[str] = set()
        """Children being started (their reports are taken already)."""
        self._suspensions = Suspensions(
            self._log, changed=self._show_status, aborted=self._abort_text
        )
        self._clock: tuple[float, float | None] = (0.0, None)
        """The deadline clock for continue-as-new: seconds used before the running
        stretch, and the workflow time it began (None: stopped)."""
        self._features: tuple[Feature, ...] = ()
        """This Run's features (``FEATURES``), made by the tool-call kernel, which is the
        ``RunView`` they see."""
        self._model_task: asyncio.Task[Any] | None = None
        """The model-role call in flight (an agent's model call or compaction)."""
        self._start = NOT_ASKED  # what the Run's start asked (_patches.ask_at_start)

    # --- hooks of a Run kind -------------------------------------------------------------

    @abc.abstractmethod
    def _admit(self, spec: AgentSpec | WorkflowSpec) -> None:
        """Take the admitted Spec and record ``run_admitted``."""

    @abc.abstractmethod
    async def _body(self) -> Outcome:
        """Run to an Outcome (a Stop raised inside is caught by the caller)."""

    def _aborting(self) -> None:
        """Stop what an abort stops at once (beyond interruptible tool calls): the model
        call in flight."""
        if self._model_task is not None:
            self._model_task.cancel()

    def _steer_into(self, input: SteerInput) -> None:
        """Queue or forward a steer or follow-up message."""
        queue = self._steer if input.mode == "steer" else self._follow_up
        queue.append(input.message)

    def _check_steer(self, input: SteerInput) -> None:  # noqa: B027 (an optional hook)
        """Refuse a steer this Run cannot take now (beyond the caller checks)."""

    def _state_step(self) -> str | None:
        return None

    # --- the run -------------------------------------------------------------------------

    async def _run(self) -> RunResult:
        """Admit the Run, run its body within the deadline, and settle it."""
        if self._bad_input is not None:
            raise ApplicationError(self._bad_input, type=ErrorType.BAD_INPUT, non_retryable=True)
        input = self._input
        spec = input.version.spec
        if spec.kind != self.KIND:
            article = "an" if self.KIND == "agent" else "a"
            return await self._settle(
                Outcome(
                    RunStatus.FAILED, f"Version {input.version.hash} is not {article} {self.KIND}"
                )
            )
        actual = version_hash(spec)
        if actual != input.version.hash:
            return await self._settle(
                Outcome(
                    RunStatus.FAILED,
                    f"version_mismatch: input states {input.version.hash} but its spec "
                    f"hashes to {actual}",
                )
            )
        expected = workflow_id_for(input.scope.tenant, input.run_id)
        if workflow.info().workflow_id != expected:
            # Clients authorize by the tenant in the id: a Run started by hand under an
            # id that names another tenant must not run (its records would leak).
            return await self._settle(
                Outcome(
                    RunStatus.FAILED,
                    f"workflow_id: a Run of tenant {input.scope.tenant!r} and run id "
                    f"{input.run_id!r} must have workflow id {expected!r}, not "
                    f"{workflow.info().workflow_id!r}",
                )
            )
        unsupported = unsupported_features(spec)
        if unsupported:
            # Publishing refuses these; a Version that skipped publishing fails loudly
            # rather than running as if the fields were absent.
            return await self._settle(
                Outcome(
                    RunStatus.FAILED,
                    "unsupported: this runtime does not implement "
                    + "; ".join(str(problem) for problem in unsupported),
                )
            )
        self._limits = bounded_limits(spec.limits, input.bounds)
        if not input.roles_apart and fleet_roles_apart():
            # The fleet decides, not the client that started the Run: children, next Runs
            # and continue-as-new take it on through the input.
            self._input = input.model_copy(update={"roles_apart": True})
        self._admit(spec)
        self._start = ask_at_start()  # before the body schedules anything
        loop = asyncio.create_task(self._guarded_body())
        try:
            if not await self._within_deadline(loop, spec.limits.deadline_seconds):
                self._deadline_hit = True
                if not await deadline.grace(loop, kept=self._start.local_safe):
                    # Taken before cancelling: a cancelled call leaves _open_calls as it
                    # unwinds.
                    open_calls = dict(self._open_calls)
                    self._cancel_reason = deadline.passed(self._limits.deadline_seconds)
                    self._winding_down = winds_down(self.KIND, self._children, self._cancel_reason)
                    loop.cancel()
                    await workflow.wait([loop])
                    return await self._settle(self._force_settle(open_calls))
        except asyncio.CancelledError:
            # The workflow itself was cancelled (a parent's expiry or deadline, or an
            # operator cancelled it): stop the body, settle the record and the search
            # attributes, then let the cancellation end the workflow as Temporal expects.
            # Its calls still open are UNKNOWN, as when its own deadline force-settles it.
            open_calls = dict(self._open_calls)
            self._winding_down = winds_down(self.KIND, self._children, self._cancel_reason)
            loop.cancel()
            await workflow.wait([loop])
            self._unknown(open_calls, "the Run was cancelled before this call reported")
            if self._winding_down is not None:  # its features end what it owns, as it settles
                for feature in self._features:
                    await feature.cancelled()
            self._status = RunStatus.ABORTED
            outcome = Outcome(self._status, CANCELLED_REASON).with_undelivered(self._undelivered())
            self._reason = outcome.reason
            self._record_settled(outcome)
            self._show_status()
            raise
        return await self._settle(loop.result())

    async def _guarded_body(self) -> Outcome:
        try:
            return await self._body()
        except Stop as stop:
            return stop.outcome
        except (ActivityError, ChildWorkflowError) as err:
            # An activity or child that failed where no caller handles it (the policy
            # activity, starting a child): the Run fails, with its record settled.
            return Outcome(RunStatus.FAILED, f"{type(err).__name__}: {cause_text(err)}")

    async def _within_deadline(self, loop: asyncio.Task[Outcome], seconds: float) -> bool:
        """Wait for the body; False when ``seconds`` of unsuspended time ran out (the clock:
        ``_deadline.py``)."""

        def show(clock: deadline.Clock) -> None:
            self._clock = clock

        # A continued Run's clock goes on from what it had used.
        used, kept = self._clock[0], self._start.local_safe
        return await deadline.within(
            loop, seconds, used, waiting_only=self._waiting_only, show=show, kept=kept
        )

    def _waiting_only(self) -> bool:
        return self._suspensions.waiting_only(len(self._open_calls) + self._working())

    def patched(self, patch_id: str) -> bool:
        """``workflow.patched(patch_id)`` for a patch older than ``psych-local-resolution-safe``.

        A Run that asked that patch at its start runs code that has every earlier change, so
        it takes the change without asking: no marker, and no ``patched`` read in a workflow
        task a local activity's resolution can move (``_deadline.py``: such a read gives
        another answer on replay). A Run recorded before asks, as it did. The features'
        (``FEATURE_PATCHES``) need ``psych-catalog-failure-settles``; a newer start patch
        answers as the start asked (``_patches.py``).
        """
        if (answered := self._start.answers(patch_id)) is not None:
            return answered
        if patch_id in FEATURE_PATCHES:
            return self._start.catalog_settles or workflow.patched(patch_id)
        return self._start.local_safe or workflow.patched(patch_id)

    def report_to_parent(self) -> None:
        """Send the parent (a workflow) what this Run waits for when it changed, and
        whether it also executes a call then (the parent's deadline clock runs while it
        does): called when the pending items change and when a call starts or ends."""
        bounds = self._input.bounds
        if bounds is None or not bounds.report_pending or self._status.terminal:
            return
        items = self._suspensions.items()
        working = bool(items) and not self._waiting_only()
        if items != self._reported or (
            # Reported only since this patch (a Run recorded before sent no signal here).
            working != self._reported_working and self.patched("psych-child-reports-working")
        ):
            self._reported = items
            self._reported_working = working
            self._reports += 1
            report_pending(items, working, self._reports)

    def _working(self) -> int:
        """Calls executing beyond the open tool calls (an agent's model call): while one
        runs the deadline clock runs, even when a spawned child waits for an approval."""
        return 0 if self._model_task is None else 1

    def _unknown(self, open_calls: dict[str, tuple[int, str]], why: str) -> None:
        """Record each of ``open_calls`` finished UNKNOWN (the Run ends without its result)."""
        for call_id, (turn, tool) in sorted(open_calls.items()):
            self._log.add(
                ToolCallFinished(
                    **self._log.stamp(),
                    turn=turn,
                    call_id=call_id,
                    tool=tool,
                    status="unknown",
                    content=why,
                )
            )

    def _force_settle(self, open_calls: dict[str, tuple[int, str]]) -> Outcome:
        why = "the Run's deadline and grace period ran out before this call reported"
        self._unknown(open_calls, why)
        return Outcome(RunStatus.FORCE_SETTLED, deadline.passed(self._limits.deadline_seconds))

    def _past_deadline(self) -> bool:
        # A method, not the attribute: mypy narrows an attribute read before an await to
        # False and would call the check after it unreachable.
        return self._deadline_hit

    def _deadline_outcome(self) -> Outcome:
        return Outcome(
            RunStatus.FORCE_SETTLED, f"deadline: {self._limits.deadline_seconds:g} s passed"
        )

    async def _settle(self, outcome: Outcome) -> RunResult:
        # Features wind down first (live spawned children end and are recorded); a feature
        # with nothing open neither awaits nor adds a command.
        for feature in self._features:
            await feature.settling()
        outcome = outcome.with_undelivered(self._undelivered())
        self._status = outcome.status
        self._reason = outcome.reason
        self._answer = outcome.answer
        # The status goes out first (the command order committed histories have), the next
        # Runs start, and only then is run_settled written: it is the last record.
        self._show_status()
        for index, message in enumerate(self._next_run, start=1):
            await self._start_next_run(index, message)
        self._record_settled(outcome)
        if outcome.status is RunStatus.FAILED:
            # The totals ride along, so a parent can count what a failed child spent.
            raise ApplicationError(
                outcome.reason,
                self._totals.model_dump(mode="json"),
                type=ErrorType.RUN_FAILED,
                non_retryable=True,
            )
        return RunResult(
            run_id=self._input.run_id,
            status=outcome.status,
            reason=outcome.reason,
            answer=outcome.answer,
            totals=self._totals,
            outputs=self._outputs,
            handles=self._settled_handles(),
        )

    def _settled_handles(self) -> tuple[str, ...]:
        """The handles this Run owns (``RunResult.handles``); the feature view knows them."""
        return ()

    def _record_settled(self, outcome: Outcome) -> None:
        """Write ``run_settled``: always the last record."""
        self._log.add(
            RunSettled(
                **self._log.stamp(),
                status=outcome.status,
                reason=outcome.reason,
                answer=outcome.answer,
                totals=self._totals,
                outputs=self._outputs,
                undelivered=outcome.undelivered,
            )
        )

    def _undelivered(self) -> tuple[Undelivered, ...]:
        """What the Run took and no model answered: sent into a call that did not answer,
        then still queued (a workflow forwards its steers, so it holds none)."""
        return (
            *self._unanswered,
            *(Undelivered(mode="steer", message=m) for m in self._steer),
            *(Undelivered(mode="follow_up", message=m) for m in self._follow_up),
        )

    async def _start_next_run(self, index: int, message: str) -> None:
        """Start a Run of the same Version with a queued next-run message. It outlives this
        Run, so the parent-close policy abandons it rather than terminating it."""
        head = self._context_ref
        # The next Run continues this one's conversation (a thread).
        thread = None if head is None else ThreadRef(run=workflow.info().workflow_id, head=head)
        child = await start_child(
            self._input.scope,
            f"{self._input.run_id}-next{index}",
            self._input.version,
            (message,),
            depth=self._input.depth,
            depth_caps=self._input.depth_caps,
            spawn_depth=self._input.spawn_depth if self.patched("psych-children-bounded") else 0,
            summary=f"next Run of {self._input.run_id}",
            parent_close_policy=ParentClosePolicy.ABANDON,
            thread=thread,
        )
        self._log.add(NextRunStarted(**self._log.stamp(), workflow_id=child.id, message=message))

    def _show_status(self) -> None:
        """Put the Run's status and suspension reason where listing (and a parent) sees them."""
        suspension = self._suspensions.reasons()
        if self._status is RunStatus.RUNNING and suspension:
            status = RunStatus.SUSPENDED
        elif self._status is RunStatus.SUSPENDED and not suspension:
            status = RunStatus.RUNNING
        else:
            status = self._status
        self._status = status

        # What the Temporal UI (and `temporal workflow describe`, through the metadata
        # query) shows as the Run's current details: why an idle Run waits. Held in the
        # worker's memory, so it adds no command and replays alike.
        workflow.set_current_details(self._suspensions.details() or status.value)
        if not status.terminal:
            self.report_to_parent()
        if (status, suspension) == self._shown_status:
            return
        self._shown_status = (status, suspension)
        if not has_search_attributes():
            return
        workflow.upsert_search_attributes(
            [
                STATUS_KEY.value_set(status.value),
                _SUSPENSION_KEY.value_set(suspension)
                if suspension
                else _SUSPENSION_KEY.value_unset(),
            ]
        )

    # --- abort, bookkeeping --------------------------------------------------------------

    def _abort_text(self) -> str | None:
        if self._abort is None:
            return None
        by = f" by {self._abort.by}" if self._abort.by else ""
        return f"aborted{by}: {self._abort.reason}"

    def abort_reason(self) -> str:
        return self._abort_text() or "aborted"

    def check_abort(self) -> None:
        if self._abort is not None:
            raise Stop(RunStatus.ABORTED, self.abort_reason())

    def count(self, **increments: int) -> None:
        self._totals = self._totals.plus(**increments)

    def add_usage(self, usage: Usage, cost: float | None) -> None:
        if cost is None:
            self._cost_unknown = True
        self._totals = self._totals.with_usage(usage, cost, cost_unknown=self._cost_unknown)

    def add_child_totals(self, child: Totals) -> None:
        if child.cost_unknown:
            self._cost_unknown = True
        self._totals = self._totals.rolled_up(child, cost_unknown=self._cost_unknown)


def cause_text(err: BaseException) -> str:
    """The innermost message that says something about ``err``."""
    cause = err.__cause__
    while cause is not None and cause.__cause__ is not None and not str(cause):
        cause = cause.__cause__
    return str(cause or err)
