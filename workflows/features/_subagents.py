"""``delegate``: a subagent as a child AgentRun, and what its ending does to the parent.

- Depth: the child's depth is the parent's + 1 and its chain is the parent's chain, the
  parent, then the child (``specs.subagent_depth_refusal``, the function the validator
  calls); a refusal is the validator's text, read by the model as the result, and no
  failure of ``delegate`` (``_child_limits``; a Run recorded before counted it).
- Tools by definition: the child gets only the tools, MCP servers and A2A peers its parent
  has in the same definition (``specs.narrow_subagent``; peers since the start patch
  ``psych-children-bounded``); what is left out, and why, travels in
  ``ParentBounds.left_out`` so the child's ``run_admitted`` says so.
- Arguments: a call without an agent name or a task is refused (since
  ``psych-children-bounded``; before, a missing task started the child on an empty
  message).
- Roll-up: whatever the child's ending (an answer, FAILED with its totals on the
  ``RunFailed`` error, ABANDONED, ABORTED, STOPPED, FORCE_SETTLED), one ``ChildSettled``
  record and its totals in the parent's. A parent that stops while its child runs (its
  expiry, an abort; its workflow cancelled, or past its deadline and grace, since the patch
  ``psych-children-wind-down``: ``RunView.winding_down``) aborts the child and takes the
  totals of its ABORTED ending (``kernel/_wind_down.py``, shared with a workflow's agent
  steps and spawned children); a child that is cancelled or terminated instead cannot
  hand its totals back (a cancelled workflow carries no details), so the parent's cost
  becomes unknown rather than a partial sum.
- The result: a COMPLETED child's answer as plain text; any other ending as JSON
  ``{"status", "reason", "run", "agent"}`` with call status ``error``. An answer over
  ``large_result_bytes`` is stored (``psych.tool.store_result``) and the model is shown a
  handle with a preview, as for any tool's result (``answer_result``; since the patch
  ``psych-child-answers-stored``, a Run recorded before showed it whole). An answer the
  child's model cut at its output limit (its reason says so: ``answer_cut_short``) comes
  after a ``[runtime]`` note saying it is cut (``CHILD_CUT_NOTE``; since the patch
  ``psych-child-cut-answer-told``, a Run recorded before showed the cut text alone).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        ToolCallRequest,
        ToolDefinition,
    )
    from psych_runtime.specs import (
        AgentSpec,
        DepthCap,
        SubagentRef,
        Version,
        narrow_subagent,
        subagent_depth_refusal,
        version_hash,
    )
    from psych_runtime.workflows.contract._contract import ParentBounds
    from psych_runtime.workflows.contract._records import (
        ChildSettled,
        Pending,
        RunStatus,
        SuspensionReason,
        Totals,
    )
    from psych_runtime.workflows.contract._status import CUT_SHORT, answer_cut_short
    from psych_runtime.workflows.features._child_limits import refused_child
    from psych_runtime.workflows.features._fanout import fanout_refusal, over_fanout
    from psych_runtime.workflows.kernel._feature import Builtin, Feature, RunView
    from psych_runtime.workflows.kernel._handles import handed_on
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._suspensions import Wait, expires_at
    from psych_runtime.workflows.kernel._tool_result import (
        ToolResult,
        inline,
        over_bound,
        stored,
        unstored,
    )
    from psych_runtime.workflows.kernel._wind_down import (
        ChildEnding,
        ending_of,
        take_totals,
        wind_down,
    )


@dataclass(frozen=True)
class Placement:
    """Where a subagent would run below its parent, and whether it may."""

    depth: int
    """The child's depth: its parent's + 1."""
    depth_caps: tuple[DepthCap, ...]
    """The child's ``RunInput.depth_caps``: its parent's, then the parent itself."""
    refusal: str | None
    """Why it may not start (the validator's words for the same tree), or None."""


def place(
    depth: int, depth_caps: Sequence[DepthCap], parent: AgentSpec, child: AgentSpec
) -> Placement:
    """Where ``child`` runs when ``parent``, at ``depth`` below ``depth_caps``, delegates to
    it: pure, so tests check it against the validator over generated trees."""
    return Placement(
        depth=depth + 1,
        depth_caps=(*depth_caps, (parent.name, parent.limits.max_delegation_depth)),
        refusal=subagent_depth_refusal(depth + 1, depth_caps, parent, child),
    )


def delegate_definition(run: RunView) -> ToolDefinition | None:
    """``delegate``'s definition when the Run's agent has subagents."""
    spec = run.spec
    if not isinstance(spec, AgentSpec) or not spec.subagents:
        return None
    return ToolDefinition(
        name="delegate",
        description=(
            "Hand a task to one of your subagents and wait for its answer. Give it "
            "everything it needs in the task: it does not see this conversation."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": [s.name for s in spec.subagents]},
                "task": {"type": "string", "description": "The task, self-contained."},
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        },
    )


async def delegate(
    run: RunView,
    delegations: dict[int, int],
    turn: int,
    call: ToolCallRequest,
    arguments: dict[str, Any],
) -> ToolResult:
    """Run a subagent as a child AgentRun; the parent is suspended (children) meanwhile.

    The child's Version is hashed here (deterministically) and travels whole, so a replayed
    parent starts the same child. What the child waits for is mirrored in the parent, and
    answerable through the parent's id.
    """
    spec = run.spec
    assert isinstance(spec, AgentSpec)
    known = ", ".join(s.name for s in spec.subagents)
    # A Run recorded before the patch took any value as text, and started a child on an
    # empty first message when the task was missing.
    bounded = run.patched("psych-children-bounded")
    if bounded:
        problem = _bad_arguments(arguments, known)
        if problem is not None:
            return inline(call, "error", problem)
    name = str(arguments.get("agent", ""))
    sub = next((s for s in spec.subagents if s.name == name), None)
    if sub is None:
        return inline(call, "error", f"no subagent named {name!r}; you have: {known}")
    placement = place(run.input.depth, run.input.depth_caps, spec, sub.spec)
    if placement.refusal is not None:
        return refused_child(call, placement.refusal)
    started = delegations.get(turn, 0)
    over = fanout_refusal(run, turn, capped_before=started)
    if over is not None:
        return over_fanout(call, over)
    delegations[turn] = started + 1
    child_spec, left_out = narrow_subagent(spec, sub.spec, a2a_peers=bounded)
    version = Version(hash=version_hash(child_spec), spec=child_spec, published_at=workflow.now())
    index = sum(delegations.values())
    task = (str(arguments.get("task", "")),)
    child = await run.start_reporting_child(
        f"{run.input.run_id}-sub{index}",
        version,
        task,
        summary=f"subagent {name} of {run.input.run_id}",
        bounds=ParentBounds(report_pending=True, left_out=left_out, handed=handed_on(run, task)),
        depth=placement.depth,
        depth_caps=placement.depth_caps,
    )
    workflow_id = child.id
    seconds = run.suspension.children_expires_seconds
    item = Pending(
        reason=SuspensionReason.CHILDREN,
        id=workflow_id,
        call_id=call.id,
        tool="delegate",
        arguments=call.arguments,
        expires_at=expires_at(seconds),
    )
    settled = _Settled(run, turn, call.id, workflow_id, sub, version.hash)
    try:
        await run.suspensions.hold(
            Wait(item), child.done, seconds, f"subagent {workflow_id} did not finish"
        )
    except (Stop, asyncio.CancelledError) as stopped:
        # The Run stops (an abort, the wait's expiry) or is cancelled (by an operator or its
        # parent, or past its deadline and grace): the child is aborted, not cancelled, so
        # that its totals come back. Cancelled, a Run recorded before the patch left it to
        # its close policy (terminated, its totals lost).
        why = stopped.outcome.reason if isinstance(stopped, Stop) else run.winding_down
        if why is None:
            raise
        run.forget_child(workflow_id)
        ending = await wind_down(
            child, tenant=run.input.scope.tenant, reason=why, summary=f"subagent {child.id} settles"
        )
        settled.took(ending)
        raise
    run.forget_child(workflow_id)
    # Failed, it hands its totals back on its error; terminated, timed out or cancelled
    # by someone else, it does not (ABORTED, the cost unknown).
    ending = ending_of(child)
    settled.took(ending)
    if ending.result is not None and ending.status is RunStatus.COMPLETED:
        answer = ending.result.answer or ""
        if cut_told(ending.reason):
            # Ahead of the answer, so a preview of a stored one shows it too.
            answer = f"{CHILD_CUT_NOTE}\n\n{answer}"
        return await answer_result(run, call, answer)
    return settled.error_result(call, ending.status, ending.reason)


CHILD_CUT_NOTE = (
    f"[runtime] The subagent's answer was {CUT_SHORT}, so it is incomplete and may stop "
    "mid-sentence. It follows as it came."
)
"""What the model reads ahead of a subagent's answer its model cut at its output limit."""
CHILD_CUT_FIELD = f"{CUT_SHORT}, so this answer is incomplete and may stop mid-sentence"
"""``cut_short`` of a spawned child's ending (``wait_children``) whose answer is cut."""


def cut_told(reason: str) -> bool:
    """Whether the model is told that a completed child's answer, ending with ``reason``,
    was cut at its model's output limit. Until 12-06 it read the cut text as a whole
    answer (histories ``delegate_answer_cut_off_before_patch`` and
    ``spawn_answer_cut_off_before_patch``). The patch is asked only for such an answer, as
    the child's ending reaches the model (an event's task: the child's completion, or the
    model call's result, never a local activity's resolution)."""
    return answer_cut_short(reason) and workflow.patched("psych-child-cut-answer-told")


async def answer_result(run: RunView, call: ToolCallRequest, text: str) -> ToolResult:
    """What children answered (``delegate``'s answer, ``wait_children``'s endings) as the
    model reads it: whole within ``large_result_bytes``, else stored and shown as a handle
    with a preview, which ``read_tool_output`` reads on, as any tool's large result.

    Until 12-06 it was shown whole, whatever its size (an audit: a subagent's 50 KB report
    reached a lead whose ``large_result_bytes`` was 1000). The patch is asked only for an
    answer over the bound, as the child's ending arrives (an event's task). Should the store
    fail through its retries (the blob store down), the model reads the answer cut at the
    bound, told why (``unstored``; since ``psych-child-answer-unstored-read``, asked only
    then: a Run recorded before failed there, the child's answer lost to it).
    """
    limit = run.limits.large_result_bytes
    if not over_bound(text, limit) or not workflow.patched("psych-child-answers-stored"):
        return inline(call, "ok", text)
    summary = f"store the answer {call.name} {call.id} returns"
    try:
        return await stored(call, text, limit, summary=summary)
    except ActivityError as err:
        return unstored(
            err,
            lambda: workflow.patched("psych-child-answer-unstored-read"),
            call,
            "ok",
            text,
            limit,
            cause_text(err),
        )


def _bad_arguments(arguments: dict[str, Any], known: str) -> str | None:
    """What is wrong with ``delegate``'s arguments (None: nothing)."""
    agent, task = arguments.get("agent"), arguments.get("task")
    if not isinstance(agent, str) or not agent:
        return f"delegate needs agent: the name of one of your subagents ({known})"
    if not isinstance(task, str) or not task.strip():
        return (
            "delegate needs a task: the subagent's first message, self-contained (it does "
            "not see this conversation)"
        )
    return None


class _Settled:
    """Records one delegated child's ending and rolls its totals into the parent's."""

    def __init__(
        self,
        run: RunView,
        turn: int,
        call_id: str,
        workflow_id: str,
        sub: SubagentRef,
        version_hash: str,
    ) -> None:
        self._run = run
        self._turn = turn
        self._call_id = call_id
        self._workflow_id = workflow_id
        self._sub = sub
        self._version_hash = version_hash

    def took(self, ending: ChildEnding) -> None:
        """The child ended: take its totals (or make the cost unknown, when they did not
        come back) and record its ending."""
        take_totals(self._run, ending)
        self._record(ending.status, ending.described, ending.totals or Totals())

    def _record(self, status: RunStatus, reason: str, totals: Totals) -> None:
        log = self._run.log
        log.add(
            ChildSettled(
                **log.stamp(),
                turn=self._turn,
                call_id=self._call_id,
                run=self._workflow_id,
                agent=self._sub.spec.name,
                via="delegate",
                version_hash=self._version_hash,
                status=status,
                reason=reason,
                totals=totals,
            )
        )

    def error_result(self, call: ToolCallRequest, status: RunStatus, reason: str) -> ToolResult:
        """What the model reads when the child did not answer: its ending, typed."""
        ending = {
            "status": status.value,
            "reason": reason,
            "run": self._workflow_id,
            "agent": self._sub.name,
        }
        return inline(call, "error", json.dumps(ending, ensure_ascii=False))


class Subagents(Feature):
    """``delegate``; its state is how many subagents each turn started (their sum numbers
    the next one, so child ids never repeat across a continue-as-new)."""

    name = "subagents"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.delegations: dict[int, int] = {}

    def builtins(self) -> tuple[Builtin, ...]:
        return (
            Builtin(
                "delegate",
                lambda: delegate_definition(self.run),
                lambda turn, call, arguments: delegate(
                    self.run, self.delegations, turn, call, arguments
                ),
                executes=False,
            ),
        )

    def children_started(self, turn: int) -> int:
        return self.delegations.get(turn, 0)

    def carry(self) -> Any:
        return dict(self.delegations) if self.delegations else None

    def restore(self, carried: Any) -> None:
        self.delegations = {int(turn): int(count) for turn, count in dict(carried).items()}
