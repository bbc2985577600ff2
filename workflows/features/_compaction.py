"""Compaction at turn boundaries (only for a Spec that sets ``compaction``).

After each model call the Run remembers where that turn starts in the stored conversation
(a ``TurnMark``: the node the call appended, and how many of its leading messages are the
previous turn's tool results and notes) and the call's prompt tokens (input + cache read +
cache write; a provider that reports none, or zero: the request's size estimated by the model
activity, ``ModelCallResult.estimated_prompt_tokens``). When those reach ``trigger_tokens``,
at the turn's boundary (before the next
model call) the Run cuts just before a turn start, keeping the last ``keep_recent_turns``
turns verbatim; the cut only ever moves forward, and with no more turns than that past the
previous cut there is nothing to do. ``psych.model.compact`` summarises what lies before
the cut (the previous summary included) and returns a new head: the summary, then the kept
turns. The records of the replaced turns stay in the log; only what the model sees changes.

The summariser call counts in the Run's budgets like a model call (a step and a model call,
its usage and cost), so it runs only when the budget leaves room for it and the next model
call (the Run's ``max_steps`` as a parent workflow narrows it, since the patch
``psych-compaction-within-bounds``). A failed call is recorded (``CompactionFailed``) and
the Run goes on uncompacted until a later call reaches the trigger again; an answer that
came and could not be used (an empty summary) was paid for, so its usage and cost count
in the totals (and its error says them).

The per-Run state is one frozen ``CompactionState`` (``Compaction.state``), plain data a
continued execution carries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        CompactInput,
        CompactResult,
        ErrorType,
        TurnMark,
        UnusedSummary,
        Usage,
    )
    from psych_runtime.specs import AgentSpec, CompactionPolicy
    from psych_runtime.workflows.contract._records import (
        CompactionApplied,
        CompactionFailed,
        RunStatus,
    )
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._feature import CallDone, Feature, RunView
    from psych_runtime.workflows.kernel._model_calls import paid_answer
    from psych_runtime.workflows.kernel._outcome import Stop, failure_details
    from psych_runtime.workflows.kernel._run_base import cause_text


class CompactionState(BaseModel):
    """What a compacting Run knows between turns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cut_turn: int = 1
    """The first turn the model still sees verbatim (1: nothing summarised yet)."""
    marks: tuple[TurnMark, ...] = ()
    """Where each turn from ``cut_turn`` on starts in the current chain, in turn order."""
    last_tokens: int = 0
    """The last model call's input + cache-read + cache-write tokens (0 once a
    compaction was tried after it)."""
    summary_ref: str | None = None
    """The summary message the model sees now (None before the first compaction)."""
    within_bounds: bool = False
    """Whether the summariser's room is checked against the Run's ``max_steps`` as a parent
    workflow narrows it (patch ``psych-compaction-within-bounds``); a Run recorded before
    checked the Spec's, and a bounded step's summariser could take its last step."""

    @property
    def last_turn(self) -> int:
        """The last turn with a mark (``cut_turn - 1`` before any)."""
        return self.cut_turn + len(self.marks) - 1


def prompt_tokens(usage: Usage) -> int:
    """What the trigger compares: everything the call's prompt cost, cached or not."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def after_call(
    state: CompactionState, node: str, carry: int, usage: Usage, estimated: int | None = None
) -> CompactionState:
    """``state`` after a turn's model call appended ``node`` to the conversation, the first
    ``carry`` messages of which are the previous turn's tool results and notes; a provider
    that reported no prompt tokens (or zero) is judged by the activity's ``estimated`` size."""
    return state.model_copy(
        update={
            "marks": (*state.marks, TurnMark(node=node, offset=carry)),
            "last_tokens": prompt_tokens(usage) if estimated is None else estimated,
        }
    )


def next_cut(state: CompactionState, policy: CompactionPolicy) -> int | None:
    """The turn to cut before now, or None: the trigger was not reached, or no more than
    ``keep_recent_turns`` turns lie past the previous cut."""
    if state.last_tokens < policy.trigger_tokens:
        return None
    cut = state.last_turn - policy.keep_recent_turns + 1
    return cut if cut > state.cut_turn else None


def compacted(state: CompactionState, cut: int, result: CompactResult) -> CompactionState:
    """``state`` once the turns before ``cut`` are summarised (``result``)."""
    return CompactionState(
        cut_turn=cut,
        marks=result.marks,
        summary_ref=result.summary_ref,
        within_bounds=state.within_bounds,
    )


def unused_summary(err: ActivityError) -> UnusedSummary | None:
    """What a summariser answer that could not be used cost (None: no answer came): an
    empty summary's, or one the summariser call failed after (``paid_answer``)."""
    cause = err.__cause__
    if (
        isinstance(cause, ApplicationError)
        and cause.type == ErrorType.COMPACTION_FAILED
        and cause.details
    ):
        return failure_details(UnusedSummary, cause.details[0], ErrorType.COMPACTION_FAILED)
    return paid_answer(err)


class Compaction(Feature):
    """Compaction's trigger and cut, and the summariser call at a turn boundary."""

    name = "compaction"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.state = CompactionState()

    def _policy(self) -> CompactionPolicy | None:
        spec = self.run.spec
        return spec.compaction if isinstance(spec, AgentSpec) else None

    def after_call(self, done: CallDone) -> None:
        if self._policy() is None:
            return
        result = done.result
        state = after_call(
            self.state,
            result.context_ref,
            done.carried,
            result.usage,
            result.estimated_prompt_tokens,
        )
        run = self.run
        # Asked only by a Run whose parent narrowed max_steps (nothing changes for others),
        # where a model call answered: never right after a local activity (_deadline.py).
        narrowed = run.limits.max_steps < run.spec.limits.max_steps
        if (
            not state.within_bounds
            and narrowed
            and workflow.patched("psych-compaction-within-bounds")
        ):
            state = state.model_copy(update={"within_bounds": True})
        self.state = state

    def carry(self) -> Any:
        # Without the fields at their defaults: a worker of a build before a field reads
        # the carry of every Run that does not use it.
        if self._policy() is None:
            return None
        return self.state.model_dump(mode="json", exclude_defaults=True)

    def restore(self, carried: Any) -> None:
        self.state = CompactionState.model_validate(carried)

    async def boundary(self) -> None:
        """Compact the conversation if the last call reached the trigger (the compacted
        head becomes the Run's conversation).

        Raises:
            Stop: an abort arrived while the summariser ran (it is cancelled).
        """
        if self._policy() is not None:
            await self._compact()

    async def _compact(self) -> None:
        run = self.run
        context_ref = run.conversation
        spec = run.spec
        assert isinstance(spec, AgentSpec) and spec.compaction is not None
        policy = spec.compaction
        state = self.state
        cut = next_cut(state, policy)
        if cut is None or context_ref is None:
            return
        limits = run.limits if state.within_bounds else spec.limits
        if run.totals.steps + 1 >= limits.max_steps:
            # No room for the summariser and another model call: the Run is about to stop on
            # max_steps, and a summary nobody reads would only spend budget.
            return
        turn = state.last_turn
        model = policy.model or spec.model.model
        run.count(steps=1, model_calls=1)
        self.state = state.model_copy(update={"last_tokens": 0})
        task = asyncio.create_task(
            calls.compact(
                CompactInput(
                    run_id=run.input.run_id,
                    turn=turn,
                    model=model,
                    params=spec.model,
                    context_ref=context_ref,
                    marks=state.marks[cut - state.cut_turn :],
                    max_summary_tokens=policy.max_summary_tokens,
                    instructions=policy.summary_instructions,
                    stream_idle_seconds=spec.limits.stream_idle_seconds,
                    scope=run.input.scope,
                )
            )
        )
        # Held where an abort cancels the Run's model call, so an abort cancels this one too.
        run.model_task(task)
        try:
            result = await task
        except asyncio.CancelledError:
            if not run.aborted:
                raise
            raise Stop(RunStatus.ABORTED, run.abort_reason()) from None
        except ActivityError as err:
            run.model_task(None)
            run.check_abort()
            if isinstance(err.__cause__, CancelledError):
                raise asyncio.CancelledError from err
            paid = unused_summary(err)
            if paid is not None:
                run.add_usage(paid.usage, paid.cost)
            run.log.add(
                CompactionFailed(
                    **run.log.stamp(),
                    turn=turn,
                    model=model,
                    error=cause_text(err),
                    usage=None if paid is None else paid.usage,
                    cost=None if paid is None else paid.cost,
                )
            )
            return
        run.model_task(None)
        run.add_usage(result.usage, result.cost)
        run.log.add(
            CompactionApplied(
                **run.log.stamp(),
                turn=turn,
                cut_turn=cut,
                messages_replaced=result.replaced,
                summary_preview=result.summary_preview,
                summary_ref=result.summary_ref,
                model=result.model,
                usage=result.usage,
                cost=result.cost,
                latency=result.latency,
            )
        )
        self.state = compacted(state, cut, result)
        # What a thread continuing this Run reads from now on: the compacted conversation.
        run.conversation = result.context_ref
