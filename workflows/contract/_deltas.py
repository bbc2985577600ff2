"""What a follower sees of a model call while it is being written: deltas, not Records.

Deltas are never durable and never part of the workflow contract's history: the Run writes
the same Records and the same history whether anyone follows it or not. A follower that
asks for them (``PsychClient.stream(..., deltas=True)``) receives, between Records, the
text and tool-call pieces of the model call in flight, as the provider sends them; the
call's ``ModelCallFinished`` (or ``ModelCallFailed``) Record is the truth that supersedes
them. ``DeltasDropped`` says an attempt ended without an answer (it failed, or the worker
running it was lost): its pieces so far must be dropped, and a later attempt starts again.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCallPiece(_Frozen):
    """A piece of the ``index``-th tool call of an answer (ids and names come first)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class TokenDelta(_Frozen):
    """One piece of a model call's answer, as the provider sent it."""

    kind: Literal["delta"] = "delta"
    call: str
    """One attempt of one model call: ``<turn>.<activity id>#<attempt>`` of its activity."""
    turn: int
    n: int
    """Its position within the attempt, from 1, gapless."""
    text: str = ""
    tool_call: ToolCallPiece | None = None


class DeltasDropped(_Frozen):
    """The attempt ``call`` ended without an answer: drop the pieces it sent."""

    kind: Literal["deltas_dropped"] = "deltas_dropped"
    call: str
    turn: int
    reason: str


Delta = TokenDelta | DeltasDropped
"""What ``PsychClient.stream(..., deltas=True)`` yields between Records."""
