"""A WorkflowRun's step records: ``StepStarted`` and ``StepFinished``, and the step a Run
settles in the middle of.

A Run cancelled (by an operator or its parent) or force-settled (its deadline's grace ran
out) while a step runs records that step's open calls UNKNOWN as it settles
(``kernel/_run_base.py``); the step they belong to is recorded ended too, failed and
UNKNOWN for the same reason, so that a settled Run's report shows no step still running.
A step whose output would take the workflow's outputs past their bound
(``_step_output.MAX_OUTPUTS_BYTES``) is recorded failed with that output, which the Run
does not keep. Records are workflow state: writing one issues no command.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._records import (
        RunStatus,
        StepFinished,
        StepKind,
        StepStarted,
        Totals,
    )
    from psych_runtime.workflows.kernel._tool_batch import ToolBatches
    from psych_runtime.workflows.kernel._tool_result import unapproved
    from psych_runtime.workflows.runs._step_output import output_bytes, past_bound


class StepRecords(ToolBatches):
    """The records of a WorkflowRun's steps (see the module docstring)."""

    _open_step: tuple[str, StepKind, str | None] | None = None
    """The step started and not yet finished: its name, kind and child Run."""
    _outputs_bytes = 0
    """The sum of the outputs' ``output_bytes``: their JSON size, kept as steps end."""

    def _count_outputs(self, outputs: dict[str, Any]) -> None:
        """Size the outputs a continued Run carried (once per execution)."""
        self._outputs_bytes = sum(output_bytes(step, out) for step, out in outputs.items())

    def _past_bound(self, step: str, output: Any) -> str | None:
        """Why ``step``'s output fails the Run, the outputs with it passing their bound
        (``_step_output.past_bound``); None: it is counted, and the Run keeps it. A Run
        whose start did not ask ``psych-workflow-outputs-bounded`` keeps any output, as it
        did when it was recorded."""
        if not self._start.outputs_bounded:
            return None
        total, why = past_bound(step, output, self._outputs_bytes)
        if why is None:
            self._outputs_bytes = total
        return why

    def _started(
        self, step: str, kind: StepKind, index: int, input: Any, run: str | None = None
    ) -> None:
        self._log.add(
            StepStarted(
                **self._log.stamp(), step=step, step_kind=kind, index=index, input=input, run=run
            )
        )
        self._open_step = (step, kind, run)

    def _unknown(self, open_calls: dict[str, tuple[int, str]], why: str) -> None:
        """Record the open calls as ``cut_short`` says, then the step they belong to as
        ended: not run when its call (a tool step's, whose id is the step's name) was cut
        short waiting for its approval, else unknown."""
        super()._unknown(open_calls, why)
        if self._open_step is not None:
            step, kind, run = self._open_step
            error = f"unknown: {why}"
            if kind == "tool" and step in self._suspensions.unrun:
                error = unapproved(why)
            self._finish(step, kind, ok=False, error=error, run=run)

    def _finish(
        self,
        step: str,
        kind: StepKind,
        *,
        ok: bool,
        output: Any = None,
        error: str | None = None,
        run: str | None = None,
        status: RunStatus | None = None,
        totals: Totals | None = None,
    ) -> None:
        self._open_step = None
        self._log.add(
            StepFinished(
                **self._log.stamp(),
                step=step,
                step_kind=kind,
                ok=ok,
                output=output,
                error=error,
                run=run,
                status=status,
                totals=totals,
            )
        )
