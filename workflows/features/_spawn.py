"""Spawn: children the model composes at run time, inside the Spec's ``SpawnEnvelope``.

Three built-ins, offered only when the Spec has a ``spawn`` envelope (``_builtins.BUILTINS``
holds them): ``spawn`` composes a child (``_spawn_compose``), has it published as a Version
by the ``psych.version.publish`` activity, records ``child_spawned`` with the Version's
hash and starts the child as an AgentRun of that Version, returning its id at once;
``wait_children`` and ``message_child`` (``_spawn_collect.py``) collect and steer it.

Crash and replay: the publish activity's result (the whole Version) is in the parent's
history, so a replayed parent starts the child from that Version, never from a Spec
composed again, and the child, an ordinary Run, pins its hash like any other.

Per-Run state: ``RunBase._spawned`` (workflow id -> ``SpawnedChild``, plain frozen data in
spawn order) is everything this feature keeps; the child handles are the kernel's
``_children``, as delegate's are. A child's end is recorded (``child_settled``, via
``spawn``) when it comes, and its totals are rolled into the parent's; children still alive
when the parent settles are aborted (``_spawn_collect.end_spawned``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ErrorType,
        ToolCallRequest,
        ToolDefinition,
        VersionPublishInput,
    )
    from psych_runtime.specs import AgentSpec, SpawnEnvelope, Version, depth_refusal
    from psych_runtime.workflows.contract._contract import (
        AgentRunInput,
        ParentBounds,
        RunResult,
        run_search_attributes,
        workflow_id_for,
        workflow_type_for,
    )
    from psych_runtime.workflows.contract._records import (
        ChildSettled,
        ChildSpawned,
        RunStatus,
        Totals,
    )
    from psych_runtime.workflows.features._child_limits import refused_child
    from psych_runtime.workflows.features._fanout import fanout_refusal, over_fanout
    from psych_runtime.workflows.features._spawn_compose import (
        NAME_PATTERN,
        child_model,
        child_tools,
        compose,
        parse_request,
    )
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._children import failed_totals, has_search_attributes
    from psych_runtime.workflows.kernel._feature import RunView
    from psych_runtime.workflows.kernel._handles import handed_on
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline
    from psych_runtime.workflows.kernel._wind_down import ChildEnding, take_totals


class SpawnedChild(BaseModel):
    """One child this Run spawned, as plain data (what continue-as-new would carry)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    """The child's workflow id."""
    agent: str
    turn: int
    call_id: str
    """The ``spawn`` call that started it."""
    state: Literal["starting", "running", "settled", "collected", "failed"]
    """starting: being published and started; running: alive; settled: ended, not yet
    returned by ``wait_children``; collected: returned; failed: never started."""
    version_hash: str = ""
    status: RunStatus | None = None
    reason: str | None = None
    answer: str | None = None

    @property
    def alive(self) -> bool:
        """Whether it counts toward ``max_alive``."""
        return self.state in ("starting", "running")

    def ending(self) -> dict[str, Any]:
        """What ``wait_children`` returns for it: the answer, or the typed ending."""
        assert self.status is not None
        ending: dict[str, Any] = {"status": self.status.value, "run": self.run, "agent": self.agent}
        if self.status is RunStatus.COMPLETED:
            ending["answer"] = self.answer or ""
        else:
            ending["reason"] = self.reason or ""
        return ending


def envelope_of(run: RunView) -> SpawnEnvelope | None:
    """The Run's spawn envelope (None: no spawn tools)."""
    spec = run.spec
    return spec.spawn if isinstance(spec, AgentSpec) else None


# --- spawn ---------------------------------------------------------------------------------


def spawn_definition(run: RunView) -> ToolDefinition | None:
    """``spawn``, when the Spec has a spawn envelope."""
    envelope = envelope_of(run)
    if envelope is None:
        return None
    spec = run.spec
    assert isinstance(spec, AgentSpec)
    tools = [t.name for t in spec.tools if not envelope.tools or t.name in envelope.tools]
    models = list(envelope.models or (spec.model.model,))
    return ToolDefinition(
        name="spawn",
        description=(
            "Start a child agent you compose now: its name, its instructions, its task and "
            "the tools it may use. It works on its own and does not see this conversation; "
            "this returns its id at once; collect its answer with wait_children. "
            f"At most {envelope.max_alive} children may be alive at once."
        ),
        parameters={
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": NAME_PATTERN},
                "instructions": {"type": "string", "description": "The child's instructions."},
                "task": {"type": "string", "description": "The task, self-contained."},
                "tools": {
                    "type": "array",
                    "items": {"type": "string", "enum": tools},
                    "description": "Tools the child may use (none by default).",
                },
                "model": {"type": "string", "enum": models},
            },
            "required": ["name", "task"],
            "additionalProperties": False,
        },
    )


async def spawn(
    run: RunView,
    spawned: dict[str, SpawnedChild],
    turn: int,
    call: ToolCallRequest,
    arguments: dict[str, Any],
) -> ToolResult:
    """Compose, publish and start a child; its id comes back at once (see the module)."""
    spec, envelope = run.spec, envelope_of(run)
    assert isinstance(spec, AgentSpec) and envelope is not None
    request = parse_request(arguments)
    if isinstance(request, str):
        return inline(call, "error", request)
    alive = sum(1 for child in spawned.values() if child.alive)
    if alive >= envelope.max_alive:
        return refused_child(
            call,
            f"not started: {alive} spawned children are alive and spawn.max_alive is "
            f"{envelope.max_alive}; collect one with wait_children first",
        )
    spawn_depth = run.input.spawn_depth + 1
    if spawn_depth > envelope.max_depth:
        return refused_child(
            call,
            f"not started: the child would be spawn depth {spawn_depth}, beyond spawn.max_depth "
            f"({envelope.max_depth}); do the task yourself",
        )
    tools = child_tools(spec, envelope, request.tools)
    if isinstance(tools, str):
        return inline(call, "error", tools)
    model = child_model(spec, envelope, request.model)
    if isinstance(model, str):
        return inline(call, "error", model)
    child_spec = compose(spec, envelope, request, tools, model)
    if isinstance(child_spec, str):
        return inline(call, "error", child_spec)
    depth = run.input.depth + 1
    caps = (*run.input.depth_caps, (spec.name, spec.limits.max_delegation_depth))
    refused = depth_refusal(
        depth, (*caps, (child_spec.name, child_spec.limits.max_delegation_depth))
    )
    if refused is not None:
        return refused_child(call, f"not started: {refused}")

    over = fanout_refusal(run, turn, capped_before=0)
    if over is not None:
        return over_fanout(call, over)

    # Reserved before the first await: the turn's other spawn calls run concurrently, and
    # max_alive and max_fanout_per_turn must count this one.
    run_id = f"{run.input.run_id}-spawn{len(spawned) + 1}"
    workflow_id = workflow_id_for(run.input.scope.tenant, run_id)
    child = SpawnedChild(
        run=workflow_id, agent=child_spec.name, turn=turn, call_id=call.id, state="starting"
    )
    spawned[workflow_id] = child
    try:
        version = await calls.publish_version(
            VersionPublishInput(run_id=run.input.run_id, spec=child_spec),
            summary=f"publish spawned {child_spec.name}",
        )
        handle = await _start(run, run_id, version, request.task, depth, caps, spawn_depth)
    except (ActivityError, ChildWorkflowError) as err:
        spawned[workflow_id] = child.model_copy(update={"state": "failed"})
        return inline(call, "error", f"not started: {type(err).__name__}: {_cause(err)}")
    except asyncio.CancelledError:
        spawned[workflow_id] = child.model_copy(update={"state": "failed"})
        raise
    child = child.model_copy(update={"state": "running", "version_hash": version.hash})
    spawned[workflow_id] = child
    run.log.add(
        ChildSpawned(
            **run.log.stamp(),
            turn=turn,
            call_id=call.id,
            run=workflow_id,
            agent=child_spec.name,
            version_hash=version.hash,
            tools=tuple(tool.name for tool in tools),
            model=model.model,
        )
    )
    handle.add_done_callback(lambda done: _ended(run, spawned, workflow_id, done))
    started = {
        "child": workflow_id,
        "agent": child_spec.name,
        "version": version.hash,
        "tools": [tool.name for tool in tools],
        "model": model.model,
    }
    return inline(call, "ok", json.dumps(started))


async def _start(
    run: RunView,
    run_id: str,
    version: Version,
    task: str,
    depth: int,
    caps: tuple[tuple[str, int], ...],
    spawn_depth: int,
) -> workflow.ChildWorkflowHandle[Any, RunResult]:
    """Start the child, reporting its pending items to this Run (as delegate's do).

    Its parent-close policy requests cancellation: a parent that ends without settling
    (cancelled, terminated) leaves no child running on its own.
    """
    scope = run.input.scope
    workflow_id = workflow_id_for(scope.tenant, run_id)
    attributes = None
    if has_search_attributes():
        attributes = run_search_attributes(scope.tenant, version.spec.name, version.hash)
    return await run.adopt_child(
        workflow_id,
        lambda: workflow.start_child_workflow(
            workflow_type_for(version),
            AgentRunInput(
                run_id=run_id,
                version=version,
                scope=scope,
                messages=(task,),
                depth=depth,
                depth_caps=caps,
                spawn_depth=spawn_depth,
                bounds=ParentBounds(report_pending=True, handed=handed_on(run, (task,))),
            ),
            id=workflow_id,
            result_type=RunResult,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            search_attributes=attributes,
            static_summary=f"spawned {version.spec.name} of {run.input.run_id}",
        ),
    )


def _ended(
    run: RunView,
    spawned: dict[str, SpawnedChild],
    workflow_id: str,
    handle: workflow.ChildWorkflowHandle[Any, RunResult],
) -> None:
    """A spawned child's workflow ended: record it and roll its totals up."""
    if spawned[workflow_id].state != "running":
        return  # already recorded: cancelled by a settling parent
    if handle.cancelled():
        ending = ChildEnding(RunStatus.ABORTED, "cancelled", None)
    elif handle.exception() is None:
        result = handle.result()
        ending = ChildEnding(result.status, result.reason, result.totals, result)
    else:
        # Only a RunFailed error carries the child's totals: cancelled, terminated or
        # timed out, what it spent is unknown (and so the parent's cost).
        err = handle.exception()
        cause = err.__cause__ if err is not None else None
        status, reason = RunStatus.FAILED, _cause(err) if err is not None else "failed"
        totals = None
        if isinstance(cause, ApplicationError) and cause.type == ErrorType.RUN_FAILED:
            reason = cause.message
            totals = failed_totals(err)
        elif isinstance(cause, CancelledError | TerminatedError):
            status = RunStatus.ABORTED
        ending = ChildEnding(status, reason, totals)
    record_end(run, spawned, workflow_id, ending)


def record_end(
    run: RunView, spawned: dict[str, SpawnedChild], workflow_id: str, ending: ChildEnding
) -> None:
    """Record a spawned child's end (``child_settled``) and take its totals (the Run's cost
    becomes unknown when they did not come back: ``kernel/_wind_down.py``)."""
    child = spawned[workflow_id]
    answer = ending.result.answer if ending.result is not None else None
    spawned[workflow_id] = child.model_copy(
        update={
            "state": "settled",
            "status": ending.status,
            "reason": ending.reason,
            "answer": answer,
        }
    )
    run.log.add(
        ChildSettled(
            **run.log.stamp(),
            turn=child.turn,
            call_id=child.call_id,
            run=workflow_id,
            agent=child.agent,
            via="spawn",
            version_hash=child.version_hash,
            status=ending.status,
            reason=ending.described,
            totals=ending.totals or Totals(),
        )
    )
    take_totals(run, ending)
    run.forget_child(workflow_id)  # no longer forwarded to, nor its items mirrored


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    while cause is not None and cause.__cause__ is not None and not str(cause):
        cause = cause.__cause__
    return str(cause or err)
