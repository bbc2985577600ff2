"""Threads (a Run continuing an earlier one's conversation) and compaction
(``psych.model.compact``): where turns start in a stored conversation, what is summarised."""

from __future__ import annotations

from pydantic import Field

from psych_runtime.activities.contract._base import _Compact, _Payload
from psych_runtime.activities.contract._refs import BlobRef
from psych_runtime.activities.contract._usage import Latency, Usage
from psych_runtime.specs import ModelRef, Scope


class ThreadRef(_Payload):
    """The earlier Run a Run continues, and that Run's conversation head when it was read."""

    run: str
    """The earlier Run's workflow id (the same tenant's)."""
    head: BlobRef
    """Its conversation head (``RunState.conversation_ref``)."""


class ThreadContext(_Compact):
    """What the model activity puts before a threaded Run's first call."""

    head: BlobRef
    """The earlier conversation's head."""
    max_messages: int = Field(ge=1)
    """At most this many of its last messages (``Limits.max_history_records``), never
    starting on a tool result cut from its call nor ending on an unanswered tool call."""


class TurnMark(_Payload):
    """Where a turn starts in a stored conversation: ``offset`` messages into ``node``.

    ``node`` is the chain node the turn's model call appended (or, after a compaction, the
    node holding the kept turns); the messages before the offset belong to the turn before
    (its tool results and notes travel with the next call).
    """

    node: BlobRef
    offset: int = Field(default=0, ge=0)


class CompactInput(_Payload):
    """``psych.model.compact``: summarise a conversation up to a turn start."""

    run_id: str
    turn: int
    """The turn after which the Run compacts."""
    model: str
    """The summariser's model id (``compaction.model`` or the agent's)."""
    params: ModelRef
    """The agent's model parameters (sampling); the output cap is ``max_summary_tokens``."""
    context_ref: BlobRef
    """The conversation's head now."""
    marks: tuple[TurnMark, ...] = Field(min_length=1)
    """The start of the cut turn (everything before it is summarised), then the start of
    every later turn, in order."""
    max_summary_tokens: int = Field(gt=0)
    instructions: str | None = None
    """``compaction.summary_instructions``, appended to the summariser's system prompt."""
    stream_idle_seconds: float = 300.0
    scope: Scope


class CompactResult(_Payload):
    """A compacted conversation: the summary, then the kept turns verbatim."""

    context_ref: BlobRef
    """The new head: ``{summary}`` then one node of the kept messages."""
    marks: tuple[TurnMark, ...]
    """The input's marks, in the new chain."""
    summary_ref: BlobRef
    """The summary message the model sees from now on."""
    summary_preview: str
    """The summary's first ``SUMMARY_PREVIEW_CHARS`` characters."""
    replaced: int
    """Messages the summary replaced (the previous summary among them)."""
    model: str
    usage: Usage
    cost: float | None = None
    latency: Latency


class UnusedSummary(_Payload):
    """What an answer that came to no use cost, which the Run's totals count all the same:
    the details of a ``CompactionFailed`` error raised after the summariser answered (an
    empty summary), and the second details of a ``ModelCallFailed`` error raised after the
    model answered (its answer could not be stored, say; the first is the
    ``ModelFailure``)."""

    usage: Usage
    cost: float | None = None
