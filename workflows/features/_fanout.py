"""``max_fanout_per_turn``: how many children (``delegate`` and ``spawn`` together) one turn
may start, and the refusal the model reads for a call past it.

Each feature counts the children it started in a turn (``Feature.children_started``) and
the view sums them, so a delegation and a spawn of one turn share the cap; the calls of a
turn reach their handlers in call order, so the first ones start. Runs before the
``psych-fanout-counts-spawn`` patch counted delegations only (a spawn was never capped):
the shared count is taken behind the patch (``RunView.patched``: a Run that asked
``psych-local-resolution-safe`` takes it without asking), asked only when it would refuse,
so a Run under the cap records no marker and a history recorded before the patch replays
its delegations and spawns as they ran.

A call past the cap is the Run's own cap, not the tool failing, so its error counts toward
no failure streak (as a call past ``max_tool_calls_per_turn`` does not): counted, a turn
that asked for more children than the cap withheld ``delegate`` (or ``spawn``) after three
such calls and failed the Run after six. A Run recorded before the patch
``psych-fanout-no-failure`` (asked with the refusal, so only a Run past the cap records it)
counted them.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest
    from psych_runtime.workflows.kernel._feature import RunView
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline


def fanout_refusal(run: RunView, turn: int, *, capped_before: int) -> str | None:
    """Why one more child may not start in ``turn`` (None: it may).

    Args:
        run: the Run.
        turn: the turn the call belongs to.
        capped_before: what Runs before the patch counted against the cap for this
            call (delegate: the turn's delegations; spawn: nothing).
    """
    cap = run.limits.max_fanout_per_turn
    over = capped_before >= cap or (
        run.children_started(turn) >= cap and run.patched("psych-fanout-counts-spawn")
    )
    if not over:
        return None
    return (
        f"not started: more than max_fanout_per_turn ({cap}) children (delegate, spawn) in one turn"
    )


def over_fanout(call: ToolCallRequest, why: str) -> ToolResult:
    """The result of ``call``, a child past the cap (``why``: ``fanout_refusal``'s): an
    error the model reads, and no failure of its tool (see the module)."""
    counts = False if workflow.patched("psych-fanout-no-failure") else None
    return inline(call, "error", why, counts=counts)
