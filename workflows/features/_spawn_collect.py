"""Collecting, steering and ending spawned children (the children ``_spawn.spawn`` started).

``wait_children`` suspends the Run (reason ``children``, ``children_expires_seconds``) until
one or all of the named children have ended (the ``spawn`` calls of its own turn start
theirs first, since the patch ``psych-wait-children-same-turn``) and returns their answers
or typed endings (an answer the child's model cut at its output limit after ``cut_short``
saying so, since the patch ``psych-child-cut-answer-told``); ``message_child`` (only with
``may_message``) steers a live child through the contract's ``psych.steer`` signal;
``end_spawned`` runs as the Run settles (its workflow cancelled too, since the patch
``psych-children-wind-down``) and ends the children still alive, so their endings and totals
are recorded before ``run_settled``; a child that does not end in time is cancelled, and the
Run's cost becomes unknown.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest, ToolDefinition
    from psych_runtime.workflows.contract._contract import (
        ABORT,
        STEER,
        AbortInput,
        SteerInput,
        size_problem,
    )
    from psych_runtime.workflows.contract._records import Pending, RunStatus, SuspensionReason
    from psych_runtime.workflows.features._spawn import (
        SpawnedChild,
        envelope_of,
        record_end,
        spawn,
        spawn_definition,
    )
    from psych_runtime.workflows.features._subagents import (
        CHILD_CUT_FIELD,
        answer_result,
        cut_told,
    )
    from psych_runtime.workflows.kernel._feature import Builtin, Feature, RunView
    from psych_runtime.workflows.kernel._suspensions import Wait, expires_at
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline
    from psych_runtime.workflows.kernel._wind_down import ChildEnding


END_WAIT_SECONDS = 30.0
"""How long a settling parent waits for its aborted live children to end (and report their
totals) before it cancels the rest."""


# --- wait_children -------------------------------------------------------------------------

WAIT_CHILDREN = ToolDefinition(
    name="wait_children",
    description=(
        "Wait for children you spawned and get their answers (or how they ended). Name "
        "some by id, or none for all you have not collected yet; mode 'any' returns as "
        "soon as one of them has ended, 'all' (the default) when all have."
    ),
    parameters={
        "type": "object",
        "properties": {
            "children": {"type": "array", "items": {"type": "string"}},
            "mode": {"type": "string", "enum": ["all", "any"], "default": "all"},
        },
        "additionalProperties": False,
    },
)


def wait_definition(run: RunView) -> ToolDefinition | None:
    """``wait_children``, when the Spec has a spawn envelope."""
    return WAIT_CHILDREN if envelope_of(run) is not None else None


async def wait_children(
    run: RunView,
    spawned: dict[str, SpawnedChild],
    turn: int,
    call: ToolCallRequest,
    arguments: dict[str, Any],
) -> ToolResult:
    """Suspend (reason children) until the children named have ended; return each one's
    answer or typed ending, in spawn order. Children ended already return at once."""
    mode = arguments.get("mode", "all")
    named = arguments.get("children") or []
    if mode not in ("all", "any"):
        return inline(call, "error", f"mode must be 'all' or 'any', not {mode!r}")
    if not isinstance(named, list) or not all(isinstance(n, str) for n in named):
        return inline(call, "error", "children must be a list of child ids spawn returned")
    await _spawns_of_the_turn(run, turn)
    open_ = [c.run for c in spawned.values() if c.state in ("running", "settled")]
    unknown = [n for n in named if n not in open_]
    if unknown:
        return inline(
            call,
            "error",
            f"not children to wait for: {', '.join(unknown)} (spawned and not collected yet: "
            f"{', '.join(open_) or 'none'})",
        )
    targets = [c for c in open_ if c in named] if named else open_
    if not targets:
        return inline(call, "error", "no spawned child to wait for: none is open")

    def ready() -> bool:
        ended = [t for t in targets if spawned[t].state == "settled"]
        return bool(ended) and (mode == "any" or len(ended) == len(targets))

    if not ready():
        seconds = run.suspension.children_expires_seconds
        item = Pending(
            reason=SuspensionReason.CHILDREN,
            id=call.id,
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            # What the wait is for, as an external wait's item says (shown by psych status).
            question=", ".join(targets),
            expires_at=expires_at(seconds),
        )
        await run.suspensions.hold(
            Wait(item), ready, seconds, f"spawned children {', '.join(targets)} did not finish"
        )
    endings = []
    for target in targets:
        child = spawned[target]
        if child.state == "settled":
            ending = child.ending()
            if child.status is RunStatus.COMPLETED and cut_told(child.reason or ""):
                # Ahead of the answer, so the preview of endings stored as a handle shows
                # it too (a cut answer is long by nature).
                answer = ending.pop("answer")
                ending.update(cut_short=CHILD_CUT_FIELD, answer=answer)
            endings.append(ending)
            # Its answer went to the model and is never read again: not kept for the rest
            # of the Run, nor carried into each later execution's input.
            spawned[target] = child.model_copy(update={"state": "collected", "answer": None})
    return await answer_result(run, call, json.dumps(endings))


async def _spawns_of_the_turn(run: RunView, turn: int) -> None:
    """Wait until the ``spawn`` calls of ``turn``'s batch have started their children (or
    been refused), so that ``wait_children`` in the turn that spawns waits for them.

    The calls of a turn run together: a model that spawned two children and called
    ``wait_children`` in one answer had the wait answered "no spawned child to wait for:
    none is open" while both were being published, and its children went uncollected.
    A Run recorded before the patch answered so; the patch is asked only when a spawn of
    the turn is still running as ``wait_children`` starts, so no other Run records it.
    """
    running = [
        task for call, task in run.batch_calls(turn) if call.name == "spawn" and not task.done()
    ]
    if running and workflow.patched("psych-wait-children-same-turn"):
        await workflow.wait_condition(lambda: all(task.done() for task in running))


# --- message_child -------------------------------------------------------------------------

MESSAGE_CHILD = ToolDefinition(
    name="message_child",
    description=(
        "Send a message to a child you spawned that is still working: 'steer' (the default) "
        "reaches its current turn, 'follow_up' a turn after it would have answered."
    ),
    parameters={
        "type": "object",
        "properties": {
            "child": {"type": "string", "description": "The id spawn returned."},
            "message": {"type": "string"},
            "mode": {"type": "string", "enum": ["steer", "follow_up"], "default": "steer"},
        },
        "required": ["child", "message"],
        "additionalProperties": False,
    },
)


def message_definition(run: RunView) -> ToolDefinition | None:
    """``message_child``, when the envelope has ``may_message``."""
    envelope = envelope_of(run)
    return MESSAGE_CHILD if envelope is not None and envelope.may_message else None


async def message_child(
    run: RunView,
    spawned: dict[str, SpawnedChild],
    turn: int,
    call: ToolCallRequest,
    arguments: dict[str, Any],
) -> ToolResult:
    """Signal ``psych.steer`` to a live spawned child (its own handler checks it again)."""
    target, message = arguments.get("child"), arguments.get("message")
    mode = arguments.get("mode", "steer")
    if mode not in ("steer", "follow_up"):
        return inline(call, "error", f"mode must be 'steer' or 'follow_up', not {mode!r}")
    if not isinstance(message, str) or not message:
        return inline(call, "error", "message_child needs a message")
    child = spawned.get(target) if isinstance(target, str) else None
    if child is None or child.state != "running" or run.child(child.run) is None:
        live = ", ".join(c.run for c in spawned.values() if c.state == "running")
        return inline(
            call, "error", f"{target!r} is not a live child of yours (live: {live or 'none'})"
        )
    steer = SteerInput(
        tenant=run.input.scope.tenant, message=message, mode=mode, by=run.input.run_id
    )
    problem = size_problem(steer)
    if problem is not None:
        return inline(call, "error", problem)
    run.forward(child.run, STEER, steer)
    return inline(call, "ok", f"sent to {child.run} ({mode})")


# --- the parent settles --------------------------------------------------------------------


async def end_spawned(run: RunView, spawned: dict[str, SpawnedChild]) -> None:
    """Before a Run settles: abort its live spawned children and wait (bounded) for them to
    end, so their endings and totals are recorded; cancel and record those that do not.
    A Run that spawned nothing returns without a command or an await."""
    live = [child.run for child in spawned.values() if child.state == "running"]
    if not live:
        return
    abort = AbortInput(
        tenant=run.input.scope.tenant,
        by=run.input.run_id,
        reason="the parent Run settled while this spawned child was alive",
    )
    for workflow_id in live:
        handle = run.child(workflow_id)
        assert handle is not None
        task = asyncio.create_task(handle.signal(ABORT, abort))
        task.add_done_callback(_log_failure)
    try:
        await workflow.wait_condition(
            lambda: all(spawned[w].state != "running" for w in live),
            timeout=END_WAIT_SECONDS,
            timeout_summary="spawned children end",
        )
    except TimeoutError:
        for workflow_id in live:
            if spawned[workflow_id].state == "running":
                handle = run.child(workflow_id)
                if handle is not None:
                    handle.cancel()
                # What it spent is unknown, and so is the parent's cost (never a partial
                # sum): until 12-05 it was taken as nothing, and the cost looked known.
                reason = (
                    f"cancelled: did not end within {END_WAIT_SECONDS:g} s of the parent settling"
                )
                record_end(run, spawned, workflow_id, ChildEnding(RunStatus.ABORTED, reason, None))


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        workflow.logger.warning("aborting a spawned child failed: %s", task.exception())


class Spawn(Feature):
    """``spawn``, ``wait_children`` and ``message_child``; the children it started, by
    workflow id in spawn order, are its state (the handles are the kernel's)."""

    name = "spawn"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.spawned: dict[str, SpawnedChild] = {}

    def builtins(self) -> tuple[Builtin, ...]:
        run, spawned = self.run, self.spawned
        return (
            Builtin(
                "spawn",
                lambda: spawn_definition(run),
                lambda turn, call, arguments: spawn(run, spawned, turn, call, arguments),
                executes=True,
            ),
            Builtin(
                "wait_children",
                lambda: wait_definition(run),
                lambda turn, call, arguments: wait_children(run, spawned, turn, call, arguments),
                executes=False,
            ),
            Builtin(
                "message_child",
                lambda: message_definition(run),
                lambda turn, call, arguments: message_child(run, spawned, turn, call, arguments),
                executes=True,
            ),
        )

    def children_started(self, turn: int) -> int:
        return sum(1 for c in self.spawned.values() if c.turn == turn and c.state != "failed")

    def carry(self) -> Any:
        return tuple(self.spawned.values()) if self.spawned else None

    def restore(self, carried: Any) -> None:
        self.spawned.clear()
        for data in carried:
            child = SpawnedChild.model_validate(data)
            self.spawned[child.run] = child

    async def settling(self) -> None:
        await end_spawned(self.run, self.spawned)

    async def cancelled(self) -> None:
        # Its workflow cancelled, the Run does not settle through `settling`: its live
        # children end as they would then, so their totals reach it (a Run recorded before
        # the patch psych-children-wind-down left them to their close policy).
        await end_spawned(self.run, self.spawned)
