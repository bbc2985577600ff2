"""The live channel of a model call: what its heartbeat advertises and what its relay sends.

Deltas never enter a Run's history. The model activity (``psych.model.call``) heartbeats
``LiveAttempt`` as its details from its first beat on, whether anyone follows or not, so
the history is the same either way; a follower reads them off the pending activity
(``DescribeWorkflowExecution``, not a history event) and reads the attempt's pieces from
the worker's relay at ``LiveAttempt.url`` (``GET <url>?after=N``): one ``RelayLine`` of
JSON per line, pieces numbered from 1, then one line with ``end`` set.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class LiveAttempt(BaseModel):
    """An attempt's heartbeat details: where its pieces are served."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    call: str
    """``<turn>.<activity id>#<attempt>``: one attempt of one model call."""
    turn: int
    """The Run's turn the call belongs to."""
    url: str
    """The relay's address of this attempt: a random token, unguessable, per attempt."""


RelayEnd = Literal["completed", "failed"]
"""How an attempt ended: ``completed`` (its answer is the model call's result) or
``failed`` (drop its pieces: the call failed, was cancelled, or the relay gave up on it)."""


class RelayLine(BaseModel):
    """One line of a relay's answer: a piece (``n`` from 1) or the end (``end`` set)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    n: int = 0
    text: str = ""
    tool_index: int | None = None
    """Set on a tool-call piece: which call of the answer it belongs to."""
    tool_id: str | None = None
    tool_name: str | None = None
    tool_arguments: str = ""
    end: RelayEnd | None = None
    reason: str = ""
