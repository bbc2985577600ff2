"""Continue-as-new: a long Run goes on as a new execution under the same workflow id.

At a turn boundary (an AgentRun: the top of the turn loop, every call of the last turn
recorded; a WorkflowRun: between two steps) with no suspension pending, no child running,
no handler running, when Temporal suggests it or the execution's history has
``RunInput.continue_after_events`` events, the Run continues as new with a ``RunCarry``
in its input: everything the Run needs to go on as if nothing happened. The carried
execution does not admit again; its first record is ``run_continued`` with the next
``seq``, so the Run's records are one gapless sequence across the chain, and
``RunCarry.earlier`` says which execution holds which of them (a closed execution answers
``psych.records`` by replay, so a reader walks back by run id: ``_chain.py``).

The kernel's own state has a field each on ``RunCarry``; a feature's is its ``carry()``
under its name in ``RunCarry.features``, given back to its ``restore()`` (``_turns.py``
and ``runs/_workflow_run.py`` fill and read the carry with the helpers here), so a new
feature touches nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_jsonable_python
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._carry import (
        GuardsCarry,
        RepeatCount,
        RunCarry,
        Segment,
    )
    from psych_runtime.workflows.contract._records import RunContinued
    from psych_runtime.workflows.kernel._feature import Feature
    from psych_runtime.workflows.kernel._guards import Guards
    from psych_runtime.workflows.kernel._record_log import RecordLog


CARRIED_SINGLE_CALLS = 512
"""Repeat-guard entries seen once that a continued Run keeps (see ``carried_repeats``)."""


def due(
    threshold: int, turn: int, carry: RunCarry | None, *, in_flight: int, read: bool | None
) -> bool:
    """Whether the Run continues as new at this turn boundary.

    Every execution takes at least one turn first, so a threshold below what an execution
    starts with cannot make a chain that never advances. ``in_flight`` counts what is
    still open (calls, pending items, running children): a child would be terminated by
    its parent's close, so the Run waits for a boundary with nothing open. ``read`` is
    ``long_enough(threshold)`` as read where the turn's model call answered (None: read
    it here, as a Run recorded before the patch ``psych-local-resolution-safe`` did).
    """
    if in_flight or turn <= (carry.turn if carry is not None else 0):
        return False
    return long_enough(threshold) if read is None else read


def record_continued(log: RecordLog, carry: RunCarry) -> None:
    """Record where a continued execution came from (``run_continued``), instead of the
    ``run_admitted`` its first execution recorded."""
    log.add(
        RunContinued(
            **log.stamp(),
            previous_run_id=carry.previous_run_id,
            execution=len(carry.earlier) + 1,
            history_length=carry.history_length,
            history_size=carry.history_size,
            deadline_used=carry.deadline_used,
        )
    )


def long_enough(threshold: int) -> bool:
    """Whether this execution's history has ``threshold`` events, or Temporal suggests
    continuing as new.

    Both facts come from the started event of the workflow task the workflow runs in, so
    they are read where that task is the same live and on replay: where an activity's
    result arrived, not right after a local activity (a turn's last tool call may be one),
    whose resolution can reach the workflow a task later live than on replay
    (``_deadline.py``).
    """
    info = workflow.info()
    return info.get_current_history_length() >= threshold or info.is_continue_as_new_suggested()


def deadline_used(used: float, started: float | None) -> float:
    """Seconds of the deadline clock used: ``used`` before the running stretch, which began
    at workflow time ``started`` (None: the clock is stopped, only waits are open)."""
    return used if started is None else used + workflow.time() - started


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


def chain_fields(previous: RunCarry | None, last_seq: int) -> dict[str, Any]:
    """The carry's fields that place this execution in the chain: who it was, how long its
    history grew, and which records it and the executions before it hold."""
    info = workflow.info()
    first = previous.next_seq if previous is not None else 1
    earlier = (previous.earlier if previous is not None else ()) + (
        Segment(run_id=info.run_id, first_seq=first, last_seq=last_seq),
    )
    return {
        "previous_run_id": info.run_id,
        "history_length": info.get_current_history_length(),
        "history_size": info.get_current_history_size(),
        "earlier": earlier,
        "next_seq": last_seq + 1,
    }


def features_carry(features: Sequence[Feature]) -> dict[str, Any]:
    """Each feature's ``carry()`` under its name, as JSON (so the carry equals what the
    next execution decodes); a feature with nothing to carry is left out."""
    carried: dict[str, Any] = {}
    for feature in features:
        state = feature.carry()
        if state is not None:
            carried[feature.name] = to_jsonable_python(state)
    return carried


def restore_features(features: Sequence[Feature], carry: RunCarry) -> None:
    """Give each feature back what it carried."""
    for feature in features:
        if feature.name in carry.features:
            feature.restore(carry.features[feature.name])


def guards_carry(guards: Guards) -> GuardsCarry:
    """The guards' bookkeeping a continued Run keeps (the repeats bounded)."""
    return GuardsCarry(
        streaks=dict(guards.streaks),
        withheld=tuple(guards.withheld),
        repeats=carried_repeats(guards),
    )


def guards_of(carry: GuardsCarry) -> Guards:
    """The guards as a continued Run takes them back."""
    repeats: dict[tuple[str, str], dict[str, int]] = {}
    for entry in carry.repeats:
        repeats.setdefault((entry.tool, entry.arguments), {})[entry.result_ref] = entry.times
    return Guards(streaks=dict(carry.streaks), withheld=list(carry.withheld), repeats=repeats)
