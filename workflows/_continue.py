"""Continue-as-new: a long AgentRun goes on as a new execution under the same workflow id.

At a turn boundary (the top of the turn loop: every call of the last turn recorded, no
suspension pending, no child running, no handler running), when Temporal suggests it or
the execution's history has ``RunInput.continue_after_events`` events, the Run continues
as new with a ``RunCarry`` in its input: everything the turn loop needs to go on as if
nothing happened. The carried execution does not admit again; its first record is
``run_continued`` with the next ``seq``, so the Run's records are one gapless sequence
across the chain, and ``RunCarry.earlier`` says which execution holds which of them (a
closed execution answers ``psych.records`` by replay, so a reader walks back by run id:
``_chain.py``).

Adding a feature's per-Run state to the carry is one field on ``_carry.RunCarry`` (with
a default, so carries already in flight still decode), one line in ``carry_of`` and one
in ``restore``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ChatMessage
    from psych_runtime.workflows._carry import (
        GuardsCarry,
        McpCarry,
        RepeatCount,
        RunCarry,
        Segment,
    )
    from psych_runtime.workflows._guards import Guards
    from psych_runtime.workflows._shape import has

if TYPE_CHECKING:
    from psych_runtime.workflows._agent_run import AgentRun

CARRIED_SINGLE_CALLS = 512
"""Repeat-guard entries seen once that a continued Run keeps (see ``carried_repeats``)."""
PATCH = "psych-continue-as-new"
"""Asked only when a Run is due, so a Run that never continues pays no marker."""


def due(threshold: int, turn: int, carry: RunCarry | None, *, in_flight: int) -> bool:
    """Whether the Run continues as new at this turn boundary.

    Every execution takes at least one turn first, so a threshold below what an execution
    starts with cannot make a chain that never advances. ``in_flight`` counts what is
    still open (calls, pending items, running children): a child would be terminated by
    its parent's close, so the Run waits for a boundary with nothing open.
    """
    if in_flight or turn <= (carry.turn if carry is not None else 0):
        return False
    info = workflow.info()
    # Both facts come from the workflow task's started event, so replay sees the same.
    over = info.get_current_history_length() >= threshold or info.is_continue_as_new_suggested()
    return over and has(PATCH)


def deadline_used(used: float, started: float | None) -> float:
    """Seconds of the deadline clock used: ``used`` before the running stretch, which began
    at workflow time ``started`` (None: the clock is stopped, only waits are open)."""
    return used if started is None else used + workflow.time() - started


async def continue_as_new(
    run: AgentRun,
    pending: list[ChatMessage | str],
    context_ref: str | None,
    system_ref: str | None,
) -> NoReturn:
    """Continue ``run`` as a new execution carrying its state (raises, never returns)."""
    # Handlers (updates, signals) finish first, and the carry is taken with no await
    # after it, so a steer that arrives now is carried, not dropped.
    await workflow.wait_condition(workflow.all_handlers_finished)
    run._check_abort()
    carry = carry_of(run, pending, context_ref, system_ref)
    workflow.continue_as_new(run._input.model_copy(update={"carry": carry}))


def carry_of(
    run: AgentRun,
    pending: list[ChatMessage | str],
    context_ref: str | None,
    system_ref: str | None,
) -> RunCarry:
    """The carry of ``run`` at this turn boundary."""
    info = workflow.info()
    previous = run._input.carry
    first = previous.next_seq if previous is not None else 1
    earlier = (previous.earlier if previous is not None else ()) + (
        Segment(run_id=info.run_id, first_seq=first, last_seq=run._log.last_seq),
    )
    mcp = run._mcp
    return RunCarry(
        previous_run_id=info.run_id,
        history_length=info.get_current_history_length(),
        history_size=info.get_current_history_size(),
        earlier=earlier,
        next_seq=run._log.last_seq + 1,
        turn=run._turn,
        totals=run._totals,
        cost_unknown=run._cost_unknown,
        deadline_used=deadline_used(*run._clock),
        not_before=dict(run._not_before),
        model_failures=dict(run._model_failures),
        guards=GuardsCarry(
            streaks=dict(run._guards.streaks),
            withheld=tuple(run._guards.withheld),
            repeats=carried_repeats(run._guards),
        ),
        steer=tuple(run._steer),
        follow_up=tuple(run._follow_up),
        next_run=tuple(run._next_run),
        pending=tuple(pending),
        context_ref=context_ref,
        system_ref=system_ref,
        mcp=McpCarry(
            catalog_hash=mcp.catalog_hash,
            tools_ref=mcp.tools_ref,
            entries=dict(mcp.entries),
            loaded=tuple(mcp.loaded),
            # Sorted: set order is not deterministic across processes.
            unavailable=tuple(sorted(mcp.unavailable)),
            deferred=mcp.deferred,
            catalogs=dict(mcp.catalogs),
            statuses=mcp.statuses,
        ),
        delegations=dict(run._delegations),
        tasks=run._tasks,
        compaction=run._compaction,
        spawned=tuple(run._spawned.values()),
    )


def carried_repeats(guards: Guards) -> tuple[RepeatCount, ...]:
    """The repeat guard's counts a continued Run keeps, bounded.

    Every call ever made has an entry, so carrying them all would grow the carry with the
    Run (8000 calls are about 1 MB of input, against Temporal's 2 MB payload limit).
    Kept: every call seen more than once (what a looping model produces), and the
    ``CARRIED_SINGLE_CALLS`` most recently first-seen calls seen once. Trade-off: a call
    seen once long before the cut and repeated after it counts from zero again.
    """
    entries = [
        RepeatCount(tool=tool, arguments=arguments, result_ref=ref, times=times)
        for (tool, arguments), seen in guards.repeats.items()
        for ref, times in seen.items()
    ]
    singles = [i for i, entry in enumerate(entries) if entry.times == 1]
    dropped = set(singles[: max(len(singles) - CARRIED_SINGLE_CALLS, 0)])
    return tuple(entry for i, entry in enumerate(entries) if i not in dropped)


def restore(run: AgentRun, carry: RunCarry) -> None:
    """Put ``carry`` back into a freshly admitted ``run`` (its Spec already taken)."""
    run._turn = carry.turn
    run._totals = carry.totals
    run._cost_unknown = carry.cost_unknown
    run._clock = (carry.deadline_used, None)
    run._not_before = dict(carry.not_before)
    run._model_failures = dict(carry.model_failures)
    repeats: dict[tuple[str, str], dict[str, int]] = {}
    for entry in carry.guards.repeats:
        repeats.setdefault((entry.tool, entry.arguments), {})[entry.result_ref] = entry.times
    run._guards = Guards(
        streaks=dict(carry.guards.streaks), withheld=list(carry.guards.withheld), repeats=repeats
    )
    run._steer = list(carry.steer)
    run._follow_up = list(carry.follow_up)
    run._next_run = list(carry.next_run)
    mcp = run._mcp
    mcp.catalog_hash = carry.mcp.catalog_hash
    mcp.tools_ref = carry.mcp.tools_ref
    mcp.entries = dict(carry.mcp.entries)
    mcp.loaded = list(carry.mcp.loaded)
    mcp.unavailable = set(carry.mcp.unavailable)
    mcp.deferred = carry.mcp.deferred
    mcp.catalogs = dict(carry.mcp.catalogs)
    mcp.statuses = carry.mcp.statuses
    run._delegations = dict(carry.delegations)
    run._tasks = carry.tasks
    run._compaction = carry.compaction
    run._spawned = {child.run: child for child in carry.spawned}
    run._conversation_ref = carry.context_ref
