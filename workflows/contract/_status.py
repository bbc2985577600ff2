"""A Run's status vocabulary: its status, why it waits (suspension reasons and pending
items), and its totals with their arithmetic. Shared by the records (``_records.py``), the
state query and the client; ``_Sparse`` is the base of the records whose JSON leaves out a
field added later while it holds its default."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from psych_runtime.activities.contract import Usage


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Sparse(_Frozen):
    """A model whose JSON leaves out its ``_sparse`` fields while they hold their defaults
    (read back with them): a client of a build before such a field refuses fields it does
    not know, and still reads every record that does not use it."""

    _sparse: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_sparse(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if info.mode_is_json():
            for name in self._sparse:
                if getattr(self, name) == type(self).model_fields[name].default:
                    del data[name]
        return data


class _Billed(_Sparse):
    """The record of a failed model call (a turn's, the summariser's) whose answer may have
    come, billed, before the call failed (storing or returning it failed): its ``usage``
    and ``cost``, which the Run's totals count. Left out of the JSON while no answer came,
    so a client of an earlier build still reads the record."""

    usage: Usage | None = None
    """The billed answer's tokens; None: no answer came."""
    cost: float | None = None
    """Its cost; None when no answer came or its price is unknown (never 0 for unknown)."""
    _sparse: ClassVar[tuple[str, ...]] = ("usage", "cost")


class RunStatus(StrEnum):
    """Where a Run is. All but RUNNING and SUSPENDED are terminal."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    """Waiting on a person or a system: an approval, an answer, an external completion."""
    COMPLETED = "completed"
    """The model answered (finished with no tool calls)."""
    STOPPED = "stopped"
    """A budget stopped it: max_turns or max_steps."""
    FAILED = "failed"
    """An error ended it: non-transient model error, retry budget, hard stop, bad Version."""
    FORCE_SETTLED = "force_settled"
    """The deadline and its grace period ran out; open calls were settled UNKNOWN."""
    ABORTED = "aborted"
    """An abort arrived; interruptible calls were cancelled, the others finished."""
    ABANDONED = "abandoned"
    """A suspension expired with nobody answering."""

    @property
    def terminal(self) -> bool:
        """Whether the Run has settled."""
        return self not in (RunStatus.RUNNING, RunStatus.SUSPENDED)


CUT_SHORT = "cut short: the model stopped at its output token limit"
"""What a Run's reason says of an answer it keeps that the model cut at its output limit
(``finish_reason: length``): its own final answer, or a workflow step's output."""
CUT_HINT = "(finish_reason length; raise the model's max_output_tokens)"
"""What follows ``CUT_SHORT`` in a reason: how to get the whole answer."""


def answer_cut_short(reason: str | None) -> bool:
    """Whether a settled Run's ``reason`` says an answer it keeps was cut at the model's
    output limit (``CUT_SHORT``): its final answer (completed, or stopped by a bound with
    input still waiting for a turn), or a workflow step's output. Read it of a Run that
    did not fail: a FAILED workflow's reason may quote its failed step's, which says so of
    an answer that step's Run kept and the workflow does not."""
    return reason is not None and CUT_SHORT in reason


class SuspensionReason(StrEnum):
    """What one pending item waits for. The one definition of the reasons: the values are
    wire strings (recorded histories, the ``PsychSuspension`` search attribute, the plain
    ``temporal`` CLI's updates), so a value never changes; a new reason is a new member,
    and mypy then names every ``match`` on a reason that must handle it."""

    APPROVAL = "approval"
    """An approver allows or rejects a tool call the Policy holds for approval."""
    QUESTION = "question"
    """Someone answers the model's ``ask_question``."""
    EXTERNAL = "external"
    """A system completes a tool's external wait (by its wait token)."""
    CHILDREN = "children"
    """Child Runs end: a ``delegate`` call's subagent, or the ones ``wait_children`` names."""
    AUTHORIZATION = "authorization"
    """A person consents to an MCP server's OAuth (``authorization_code``): the item's
    ``question`` is the URL they open, ``tool`` the server; the OAuth callback resumes it."""


CallSuspensionReason = Literal[
    SuspensionReason.APPROVAL,
    SuspensionReason.QUESTION,
    SuspensionReason.EXTERNAL,
    SuspensionReason.AUTHORIZATION,
]
"""The reasons a resume answers (``psych.resume``): a tool call waiting for a person or a
system, or a person's consent (completed by the OAuth callback). A wait for children is
never resumed; it ends when they do."""


class Pending(_Frozen):
    """One thing a suspended Run waits for."""

    reason: SuspensionReason
    id: str
    """What a resume names: the tool call id (approval, question) or the wait token."""
    call_id: str
    tool: str
    arguments: str = ""
    question: str | None = None
    expires_at: datetime
    run: str | None = None
    """The workflow id of the child Run that holds this item (a workflow step's agent, a
    subagent), shown by its parent and resumable through the parent's id; None: this Run."""


class Totals(_Frozen):
    """Running totals of a Run."""

    turns: int = 0
    steps: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    transient_failures: int = 0
    usage: Usage = Usage()
    cost: float | None = None
    """Sum of known costs; ``None`` while any call's price was unknown. A Run's totals
    start at 0 (nothing spent is a known cost); ``None`` by default is what the totals of a
    child that never reached its parent show."""

    def plus(self, **increments: int) -> Totals:
        """These totals with the named counters increased."""
        return self.model_copy(
            update={name: getattr(self, name) + value for name, value in increments.items()}
        )

    def with_usage(self, usage: Usage, cost: float | None, *, cost_unknown: bool) -> Totals:
        """These totals with one more call's usage and cost; the cost stays None once any
        price was unknown (``cost_unknown``), never a partial sum shown as the whole."""
        summed = Usage(
            **{
                name: getattr(self.usage, name) + getattr(usage, name)
                for name in Usage.model_fields
            }
        )
        new_cost = None if cost_unknown else (self.cost or 0.0) + (cost or 0.0)
        return self.model_copy(update={"usage": summed, "cost": new_cost})

    def rolled_up(self, child: Totals, *, cost_unknown: bool) -> Totals:
        """These totals with a child Run's added (its calls, usage and cost)."""
        return self.plus(
            steps=child.steps,
            model_calls=child.model_calls,
            tool_calls=child.tool_calls,
            transient_failures=child.transient_failures,
        ).with_usage(child.usage, child.cost, cost_unknown=cost_unknown)

    @property
    def cost_unknown(self) -> bool:
        """Whether some call's price was unknown, or some child's totals were lost: a
        Run's totals start at a known 0, so only those make their cost None. (A Run that
        started before 12-06 began at None: one that no call answered reads unknown.)"""
        return self.cost is None
