"""Compaction at turn boundaries (only for a Spec that sets ``compaction``).

After each model call the Run remembers where that turn starts in the stored conversation
(a ``TurnMark``: the node the call appended, and how many of its leading messages are the
previous turn's tool results and notes) and the call's prompt tokens (input + cache read +
cache write). When those reach ``trigger_tokens``, at the turn's boundary (before the next
model call) the Run cuts just before a turn start, keeping the last ``keep_recent_turns``
turns verbatim; the cut only ever moves forward, and with no more turns than that past the
previous cut there is nothing to do. ``psych.model.compact`` summarises what lies before
the cut (the previous summary included) and returns a new head: the summary, then the kept
turns. The records of the replaced turns stay in the log; only what the model sees changes.

The summariser call counts in the Run's budgets like a model call (a step and a model call,
its usage and cost), so it runs only when the budget leaves room for it and the next model
call. A failed call is recorded (``CompactionFailed``) and the Run goes on uncompacted
until a later call reaches the trigger again.

The per-Run state is one frozen ``CompactionState`` (``AgentRun._compaction``), plain data a
continued execution can carry.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import CompactInput, CompactResult, TurnMark, Usage
    from psych_runtime.specs import AgentSpec, CompactionPolicy
    from psych_runtime.workflows import _activity_calls as calls
    from psych_runtime.workflows._carry import CompactionState
    from psych_runtime.workflows._outcome import Stop
    from psych_runtime.workflows._records import CompactionApplied, CompactionFailed, RunStatus
    from psych_runtime.workflows._run_base import cause_text

if TYPE_CHECKING:
    from psych_runtime.workflows._agent_run import AgentRun


def prompt_tokens(usage: Usage) -> int:
    """What the trigger compares: everything the call's prompt cost, cached or not."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def after_call(state: CompactionState, node: str, carry: int, usage: Usage) -> CompactionState:
    """``state`` after a turn's model call appended ``node`` to the conversation, the first
    ``carry`` messages of which are the previous turn's tool results and notes."""
    return state.model_copy(
        update={
            "marks": (*state.marks, TurnMark(node=node, offset=carry)),
            "last_tokens": prompt_tokens(usage),
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
    return CompactionState(cut_turn=cut, marks=result.marks, summary_ref=result.summary_ref)


async def compact_at_boundary(run: AgentRun, context_ref: str | None) -> str | None:
    """Compact ``run``'s conversation if its last call reached the trigger; the head the
    next model call continues (``context_ref`` when nothing was compacted).

    Raises:
        Stop: an abort arrived while the summariser ran (it is cancelled).
    """
    spec = run._spec
    assert isinstance(spec, AgentSpec) and spec.compaction is not None
    policy = spec.compaction
    state = run._compaction
    cut = next_cut(state, policy)
    if cut is None or context_ref is None:
        return context_ref
    if run._totals.steps + 1 >= spec.limits.max_steps:
        # No room for the summariser and another model call: the Run is about to stop on
        # max_steps, and a summary nobody reads would only spend budget.
        return context_ref
    turn = state.last_turn
    model = policy.model or spec.model.model
    run._count(steps=1, model_calls=1)
    run._compaction = state.model_copy(update={"last_tokens": 0})
    task = asyncio.create_task(
        calls.compact(
            CompactInput(
                run_id=run._input.run_id,
                turn=turn,
                model=model,
                params=spec.model,
                context_ref=context_ref,
                marks=state.marks[cut - state.cut_turn :],
                max_summary_tokens=policy.max_summary_tokens,
                instructions=policy.summary_instructions,
                stream_idle_seconds=spec.limits.stream_idle_seconds,
                scope=run._input.scope,
            )
        )
    )
    # Held where an abort cancels the Run's model call, so an abort cancels this one too.
    run._model_task = task
    try:
        result = await task
    except asyncio.CancelledError:
        if run._abort is None:
            raise
        raise Stop(RunStatus.ABORTED, run._abort_reason()) from None
    except ActivityError as err:
        run._model_task = None
        run._check_abort()
        if isinstance(err.__cause__, CancelledError):
            raise asyncio.CancelledError from err
        run._log.add(
            CompactionFailed(**run._log.stamp(), turn=turn, model=model, error=cause_text(err))
        )
        return context_ref
    run._model_task = None
    run._add_usage(result.usage, result.cost)
    run._log.add(
        CompactionApplied(
            **run._log.stamp(),
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
    run._compaction = compacted(state, cut, result)
    # What a thread continuing this Run reads from now on: the compacted conversation.
    run._conversation_ref = result.context_ref
    return result.context_ref
