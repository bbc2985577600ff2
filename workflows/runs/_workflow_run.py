"""WorkflowRun: a WorkflowSpec's steps, in order, as one durable Run.

A ``ToolStep`` calls its tool with its fixed arguments through the same pipeline as an
agent's tool call (``_tool_calls.py``: policy, approval, exactly-once, large results,
records); an ``AgentStep`` runs as a child AgentRun and a ``WorkflowStepRef`` as a child
WorkflowRun, each given the workflow's input followed by the prior steps' outputs keyed by
step name. The Run stops at the first step that fails; its result is every step's output
keyed by step name, bounded in size (``_step_output.MAX_OUTPUTS_BYTES``: a step whose output
would pass it fails). The workflow's limits and suspension govern the whole Run: its children
get what is left of its retry budget and its expiries, report what they wait for (so the
workflow is suspended while a child is, resumable through the workflow's own id), and abort
and steer messages are forwarded to the running step. A long workflow continues as new
between two steps, as an AgentRun does at a turn boundary (``kernel/_continue.py``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import CatalogEntry, ToolCallRequest, ToolCatalog
    from psych_runtime.specs import (
        AgentSpec,
        AgentStep,
        ToolStep,
        Version,
        WorkflowSpec,
        WorkflowStepRef,
        version_hash,
    )
    from psych_runtime.workflows.contract._carry import RunCarry
    from psych_runtime.workflows.contract._contract import (
        ABORT,
        STEER,
        WORKFLOW_RUN,
        ParentBounds,
        RefusalKind,
        RunResult,
        SteerInput,
        WorkflowRunInput,
        refusal,
    )
    from psych_runtime.workflows.contract._records import Pending, RunAdmitted, RunStatus, StepKind
    from psych_runtime.workflows.contract._status import answer_cut_short
    from psych_runtime.workflows.features import FEATURES
    from psych_runtime.workflows.kernel import _continue as continuing
    from psych_runtime.workflows.kernel._activity_calls import runs_local
    from psych_runtime.workflows.kernel._catalog import left_out, resolve
    from psych_runtime.workflows.kernel._children import failed_totals
    from psych_runtime.workflows.kernel._handlers import parse_input
    from psych_runtime.workflows.kernel._handles import handed_on
    from psych_runtime.workflows.kernel._outcome import Outcome, Stop
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._wind_down import take_totals, wind_down
    from psych_runtime.workflows.runs._step_output import cut_note, step_output
    from psych_runtime.workflows.runs._step_records import StepRecords


LOCAL_STEPS_PER_READ = 100
"""Steps run as local activities in a row after which a workflow pauses (``READ_PAUSE``)
to read its history's length: each adds a few events, so 100 stay far below the limit."""
READ_PAUSE = timedelta(milliseconds=1)


class _StepFailed(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


@workflow.defn(name=WORKFLOW_RUN)
class WorkflowRun(StepRecords):
    """One workflow Run (see the module docstring)."""

    KIND: ClassVar[str] = "workflow"
    FEATURES = FEATURES

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # Untyped so that a start with no argument or two fails the Run, not every task.
        super().__init__(parse_input(args, WorkflowRunInput))
        self._step: str | None = None
        self._running: str | None = None
        self._running_kind: StepKind | None = None
        """The workflow id of the running agent or workflow step."""
        self._catalog: ToolCatalog | None = None
        """The tool steps' code and HTTP tools (resolved once per Run, carried on); None
        for a workflow without tool steps."""
        self._long_enough = False
        """Whether the history was long enough to continue as new, as read where the last
        step that was not a local activity ended (``_step_ended``)."""
        self._local_steps = 0
        """Steps run as local activities since that read."""
        self._cut_steps: tuple[str, ...] = ()
        """The steps done whose output is an answer cut at the model's output limit."""

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        """Run the steps in order to a settled state."""
        return await self._run()

    def _admit(self, spec: AgentSpec | WorkflowSpec) -> None:
        assert isinstance(spec, WorkflowSpec)
        self._take_spec(spec)
        self._outputs = {}
        carry = self._input.carry
        if carry is not None:
            # Continue-as-new: admitted by the first execution; this one goes on from the
            # steps done.
            self._restore(carry)
            continuing.record_continued(self._log, carry)
            return
        self._log.add(
            RunAdmitted(
                **self._log.stamp(),
                version_hash=self._input.version.hash,
                agent=spec.name,
                messages=self._input.messages,
                system_prompt="",
                spec_kind="workflow",
            )
        )

    def _state_step(self) -> str | None:
        return self._step

    # --- abort and steer reach the running step ------------------------------------------

    def _aborting(self) -> None:
        if self._running is not None and self._abort is not None:
            self.forward(self._running, ABORT, self._abort)

    def _abort_refuses_signal(self, item: Pending) -> bool:
        # A step's items under the first patch: a workflow refused them with its own since
        # ``psych-abort-ends-answers``, the abort going on to the step (``_aborting``).
        return workflow.patched("psych-abort-ends-answers")

    def _check_steer(self, input: SteerInput) -> None:
        if self._running is None:
            step = self._step_now()
            raise refusal(
                RefusalKind.NO_STEP, f"{step}: only an agent step takes {input.mode} messages"
            )

    def _step_now(self) -> str:
        """What runs while no agent or nested workflow step does, for a refusal."""
        if self._step is None:
            return "no step is running"
        spec = self._spec
        assert isinstance(spec, WorkflowSpec)
        if any(s.name == self._step and isinstance(s, ToolStep) for s in spec.steps):
            return f"step {self._step!r} is a tool step"
        return f"step {self._step!r} is starting or has just ended (between steps)"

    def _check_steer_target(self, input: SteerInput) -> None:
        if self._running is not None and self._running_kind == "workflow":
            # Forwarded as a signal, it would be refused by the nested Run whenever its own
            # step is a tool step, and that refusal only logged: the steer lost.
            raise refusal(
                RefusalKind.NO_STEP,
                f"step {self._step!r} is a nested workflow: send the {input.mode} to its Run "
                f"{self._running} (it takes one while an agent step of its runs)",
            )

    def _steer_into(self, input: SteerInput) -> None:
        if self._running is not None:
            self.forward(self._running, STEER, input)

    # --- the steps -----------------------------------------------------------------------

    async def _body(self) -> Outcome:
        run = self._input
        with self._trace.run(
            kind=self.KIND,
            name=self._spec.name,
            run_id=run.run_id,
            tenant=run.scope.tenant,
            version=run.version.hash,
        ):
            return self._trace.settled(await self._steps())

    async def _steps(self) -> Outcome:
        spec = self._spec
        assert isinstance(spec, WorkflowSpec)
        carry = self._input.carry
        done = carry.turn if carry is not None else 0
        if carry is not None and carry.catalog is not None:
            self._catalog = carry.catalog
            # What the carried catalogue left out for the permits (``RunState``: a query's).
            self._left_out = left_out(spec, carry.catalog)
        elif any(isinstance(step, ToolStep) for step in spec.steps[done:]):
            self._catalog = await resolve(self, builtins=False)
        catalog = self._catalog or ToolCatalog(tools_ref=None, entries=())
        for index, step in enumerate(spec.steps, start=1):
            if index <= done:
                continue  # done by an earlier execution of this Run
            self.check_abort()
            if self._past_deadline():
                return self._deadline_outcome()
            await self._continue_if_due(index - 1)
            self._turn = index
            self._step = step.name
            self._trace.step(index, step.name)
            try:
                if isinstance(step, ToolStep):
                    # The features (MCP servers) are asked before each tool step (its
                    # turn boundary).
                    offered = {entry.name: entry for entry in catalog.entries}
                    for feature in self._before_step:
                        await feature.before_step(index, catalog)
                    for feature in self._offering:
                        offered.update(feature.offered())
                    output = await self._tool_step(index, step, offered)
                    entry = offered.get(step.tool)
                    self._step_ended(local=entry is not None and runs_local(entry))
                else:
                    output = await self._child_step(index, step)
                    self._step_ended(local=False)
            except _StepFailed as failed:
                return Outcome(
                    RunStatus.FAILED, f"step {step.name!r} ({step.kind}) failed: {failed.error}"
                )
            self._outputs = {**(self._outputs or {}), step.name: output}
        self._step = None
        if self._abort is not None and self.patched("psych-workflow-abort-after-last-step"):
            # It came while the last step ran to its end (a call that cannot be cancelled
            # finishes): the Run settles ABORTED, as after any other step.
            self.check_abort()
        return Outcome(RunStatus.COMPLETED, f"completed: {len(spec.steps)} steps")

    async def _settle(self, outcome: Outcome) -> RunResult:
        # However it ends but FAILED (completed, aborted, past its deadline, a step
        # abandoned), the Run returns its steps' outputs: its reason names the ones cut at
        # the model's output limit. Only a Run that asked psych-workflow-cut-step-named
        # has any (``_child_step``): no other Run's reason changes.
        if outcome.status is not RunStatus.FAILED and self._cut_steps:
            outcome = replace(outcome, reason=outcome.reason + cut_note(self._cut_steps))
        return await super()._settle(outcome)

    # --- continue-as-new between two steps (the mechanism is ``kernel/_continue.py``) ------

    def _step_ended(self, *, local: bool) -> None:
        """Read whether the history is long enough to continue as new, where a step's end
        reaches the workflow in the same task live and on replay: a child's result, an
        activity's. A local activity's resolution can reach it a task later live
        (``kernel/_deadline.py``), so after one the read is left for later."""
        if not self._start.local_safe:
            return  # a Run recorded before read it at the boundary (``continuing.due``)
        if local:
            self._local_steps += 1
            return
        self._long_enough = continuing.long_enough(self._input.continue_after_events)
        self._local_steps = 0

    async def _continue_if_due(self, done: int) -> None:
        """Continue as new here, before step ``done + 1``, when the history is long (or
        Temporal suggests it): between two steps no call, child or wait of a step is open.
        Every execution runs one step at least (``continuing.due``)."""
        open_now = len(self._open_calls) + len(self._children) + len(self._suspensions.items())
        open_now += sum(feature.open_items() for feature in self._open_items)
        if self._local_steps >= LOCAL_STEPS_PER_READ:
            # Steps that all ran locally: a timer's firing reaches the workflow in one task
            # live and on replay, where the length can be read.
            await workflow.sleep(READ_PAUSE, summary="history length read")
            self._long_enough = continuing.long_enough(self._input.continue_after_events)
            self._local_steps = 0
        if not continuing.due(
            self._input.continue_after_events,
            done,
            self._input.carry,
            in_flight=open_now,
            read=self._long_enough if self._start.local_safe else None,
        ):
            return
        # Asked only when due: a Run recorded before never continued, and goes on in one
        # execution on replay; no other Run records the marker.
        if not self.patched("psych-workflow-continue-as-new"):
            return
        # Handlers (updates, signals) finish first, and the carry is taken with no await
        # after it, so an action that arrives now is carried (or refused), not dropped.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.check_abort()
        workflow.continue_as_new(self._input.model_copy(update={"carry": self._carry()}))

    def _carry(self) -> RunCarry:
        return RunCarry(
            **continuing.chain_fields(self._input.carry, self._log.last_seq),
            turn=self._turn,
            totals=self._totals,
            cost_unknown=self._cost_unknown,
            deadline_used=continuing.deadline_used(*self._clock),
            guards=continuing.guards_carry(self._guards),
            next_run=tuple(self._next_run),
            actions=self._kept.carry(),
            features=continuing.features_carry(self._features),
            outputs=self._outputs,
            held=tuple(sorted(self._held)),
            cut_steps=self._cut_steps,
            catalog=self._catalog,
            consents_refused=dict(self._suspensions.consents_refused),
        )

    def _restore(self, carry: RunCarry) -> None:
        """Put ``carry`` back (the Spec taken and the features admitted already)."""
        self._turn = carry.turn
        self._totals = carry.totals
        self._cost_unknown = carry.cost_unknown
        self._clock = (carry.deadline_used, None)
        self._guards = continuing.guards_of(carry.guards)
        self._next_run = list(carry.next_run)
        self._outputs = dict(carry.outputs or {})
        self._count_outputs(self._outputs)
        self._held = set(carry.held)
        self._cut_steps = carry.cut_steps
        self._suspensions.consents_refused.update(carry.consents_refused)
        continuing.restore_features(self._features, carry)

    async def _tool_step(self, index: int, step: ToolStep, offered: dict[str, CatalogEntry]) -> Any:
        self._started(step.name, "tool", index, step.arguments)
        call = ToolCallRequest(
            id=step.name, name=step.tool, arguments=json.dumps(step.arguments, sort_keys=True)
        )
        try:
            results, _ = await self._run_tools(index, (call,), offered)
        except Stop as stop:
            self._finish(step.name, "tool", ok=False, error=stop.outcome.reason)
            raise
        result = results[0]
        if result.status != "ok":
            error = f"{result.status}: {result.content}"
            if step.tool not in offered:  # say why, where a feature knows
                whys = (f.not_offered(step.tool) for f in self._features)
                error += "".join(f" ({why})" for why in whys if why is not None)
            self._finish(step.name, "tool", ok=False, error=error)
            self.check_abort()  # a call an abort cancelled ends the Run ABORTED
            raise _StepFailed(error)
        output: Any = result.content
        if result.outcome is not None and result.outcome.truncated:
            # The whole result is stored, not in the workflow: its output says where.
            output = {
                "preview": result.content,
                "result_ref": result.outcome.result_ref,
                "size": result.outcome.size,
            }
        else:
            output = step_output(result.content, self)
        if (why := self._past_bound(step.name, output)) is not None:
            self._finish(step.name, "tool", ok=False, output=output, error=why)
            self.check_abort()  # an abort that came meanwhile ends it, as after any step
            raise _StepFailed(why)
        self._finish(step.name, "tool", ok=True, output=output)
        return output

    async def _child_step(self, index: int, step: AgentStep | WorkflowStepRef) -> Any:
        kind: StepKind = "agent" if isinstance(step, AgentStep) else "workflow"
        messages = self._input.messages
        if self._outputs:
            messages = (
                *messages,
                "Outputs of the previous steps, keyed by step name (JSON):\n"
                + json.dumps(self._outputs, sort_keys=True, ensure_ascii=False),
            )
        steps_left = self._limits.max_steps - self._totals.steps
        # A Run recorded before this check started the step anyway: the patch is asked
        # only on the path that changed, so no other Run records its marker.
        if steps_left <= 0 and self.patched("psych-workflow-steps-bound-children"):
            error = f"not run: the Run's max_steps ({self._limits.max_steps}) is used up"
            self._started(step.name, kind, index, None)
            self._finish(step.name, kind, ok=False, error=error)
            raise _StepFailed(error)
        version = Version(hash=version_hash(step.spec), spec=step.spec, published_at=workflow.now())
        left = self._limits.transient_retry_budget - self._totals.transient_failures
        # A step's agent is not delegated: it keeps the workflow's depth and chain, as the
        # validator assumes (it validates a step's agent as the root of its own chain).
        child = await self.start_reporting_child(
            f"{self._input.run_id}-step{index}",
            version,
            messages,
            summary=f"step {step.name} of {self._input.run_id}",
            bounds=ParentBounds(
                transient_retry_budget=max(left, 0),
                max_steps=max(steps_left, 1),
                suspension=self._suspension,
                report_pending=True,
                handed=handed_on(self, messages),
            ),
            depth=self._input.depth,
        )
        self._started(step.name, kind, index, list(messages), child.id)
        self._running = child.id
        self._running_kind = kind
        if self._abort is not None:  # it came while the child was being started
            self.forward(child.id, ABORT, self._abort)
        try:
            result: RunResult = await self._child_result(step, kind, child)
        except ChildWorkflowError as err:
            self._running = None
            self.forget_child(child.id)
            totals = failed_totals(err)
            if totals is not None:
                self.add_child_totals(totals)
            error = cause_text(err)
            self._finish(
                step.name,
                kind,
                ok=False,
                error=error,
                run=child.id,
                status=RunStatus.FAILED,
                totals=totals,
            )
            raise _StepFailed(f"{child.id}: {error}") from err
        self._running = None
        self.forget_child(child.id)
        self.add_child_totals(result.totals)
        self._held.update(result.handles)  # its stored results: the next steps' to read
        ok = result.status is RunStatus.COMPLETED
        output = (result.answer if kind == "agent" else result.outputs) if ok else None
        too_large = self._past_bound(step.name, output) if ok else None
        self._finish(
            step.name,
            kind,
            ok=ok and too_large is None,
            output=output,
            error=too_large if ok else f"ended {result.status.value}: {result.reason}",
            run=child.id,
            status=result.status,
            totals=result.totals,
        )
        if too_large is not None:
            self.check_abort()
            raise _StepFailed(too_large)
        if ok:
            cut = answer_cut_short(result.reason)
            if cut and workflow.patched("psych-workflow-cut-step-named"):
                # The step keeps the cut answer, as its agent's Run does, and its later steps
                # read it: the workflow's reason names it, as that Run's does. Asked only
                # for such a step, as its child's end arrives (never a local activity's).
                self._cut_steps = (*self._cut_steps, step.name)
            return output
        self.check_abort()
        if result.status is RunStatus.ABANDONED:
            raise Stop(RunStatus.ABANDONED, f"step {step.name!r}: {result.reason}")
        raise _StepFailed(f"{child.id} ended {result.status.value}: {result.reason}")

    async def _child_result(
        self,
        step: AgentStep | WorkflowStepRef,
        kind: StepKind,
        child: workflow.ChildWorkflowHandle[Any, RunResult],
    ) -> RunResult:
        """The step's child's result. When the Run is cancelled meanwhile (by an operator
        or its parent, or as its deadline's grace ran out) the child is aborted instead, so
        that it hands back its totals (``kernel/_wind_down.py``), and is recorded as it
        ended; the cancellation then goes on."""
        try:
            return await asyncio.shield(child)  # a cancellation must not reach the child
        except asyncio.CancelledError:
            # Asked on the changed path only, in the task of the cancellation (its request
            # or the grace timer): no local activity is open while a child step runs.
            if not workflow.patched("psych-workflow-step-winds-down"):
                child.cancel()  # a Run recorded before cancelled it
                return await child
            ending = await wind_down(
                child,
                tenant=self._input.scope.tenant,
                reason=self._cancel_reason,
                summary=f"step {step.name}: {child.id} settles",
            )
            self._running = None
            self.forget_child(child.id)
            take_totals(self, ending)
            self._finish(
                step.name,
                kind,
                ok=False,
                error=f"ended {ending.status.value}: {ending.described}",
                run=child.id,
                status=ending.status,
                totals=ending.totals,
            )
            raise
