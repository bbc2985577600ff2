"""What the A2A feature (``_a2a.py``) keeps of a Run's peers between turns, the constants
its waits share, and which failed reads end them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        A2aCancelInput,
        A2aCards,
        A2aPollInput,
        CatalogEntry,
        ToolOutcome,
    )
    from psych_runtime.specs import A2APeer


@dataclass
class PeersState:
    """What a Run knows of its peers between turns (workflow state, not history)."""

    peers: dict[str, A2APeer] = field(default_factory=dict)
    cards_hash: str | None = None
    tools_ref: str | None = None
    entries: dict[str, CatalogEntry] = field(default_factory=dict)
    unavailable: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    """What the model is told with the next call (a peer gone or back)."""
    pollers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Wait token -> the task reading that peer task until it ends."""
    polls: dict[str, A2aPollInput] = field(default_factory=dict)
    """Wait token -> what reading it takes, while its answer has not come: the tasks a
    settling Run cancels."""
    read: set[str] = field(default_factory=set)
    """Wait tokens the poller completed with the peer's own answer (its read ran the post
    hooks), until the call takes it: any other completion is by hand."""
    answers: dict[str, ToolOutcome] = field(default_factory=dict)
    """Wait token -> the outcome of the read that completed it (in ``read``): the call's
    status and what its post or on_error hooks did, as a call answered at once has them."""
    asked: dict[str, A2aCancelInput] = field(default_factory=dict)
    """Question id -> the peer task waiting at the peer for the person's answer to it: the
    tasks a Run settling before the answer is sent cancels too."""


PEER_QUESTION = "a2a_peer_asks"
"""The key of a waited task's completion that carries the peer's question (with the task
id) rather than its answer: the call's wait puts it to the person."""

POLL_FIRST_SECONDS = 2.0
POLL_MAX_SECONDS = 60.0
"""A waiting peer task is read after 2 s, then twice as long each time, at most every
minute: a day-long task costs about 1,500 reads (each an activity in history)."""


def take_cards(state: PeersState, result: A2aCards) -> None:
    """Keep a boundary's catalogue (its hash; its entries when they changed)."""
    state.cards_hash = result.cards_hash
    if result.entries is not None:
        state.tools_ref = result.tools_ref
        state.entries = {entry.name: entry for entry in result.entries}


def cancelled(err: ActivityError) -> bool:
    """Whether a peer read failed because it was cancelled with the Run (not the peer being
    down): the call or the poller ends then, as before the patches that read on."""
    return isinstance(err.__cause__, CancelledError)
