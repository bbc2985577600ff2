"""The A2A peer payloads: a turn's catalogue of peer skills (``psych.a2a.cards``), one
message sent to a peer (``psych.tool.a2a``), reading the task it left working
(``psych.a2a.poll``) and cancelling it when the Run settles first (``psych.a2a.cancel``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_serializer

from psych_runtime.activities.contract._base import _compact_scope, _Payload
from psych_runtime.activities.contract._refs import BlobRef
from psych_runtime.activities.contract._tools import CatalogEntry
from psych_runtime.specs import A2APeer, Scope

A2A_MESSAGE_ARGUMENT = "message"
"""The argument every peer skill tool takes: the text sent to the peer."""
A2A_TASK_ARGUMENT = "task_id"
"""The optional argument that continues a peer task (one that asked for input)."""
A2A_PUSHED = "a2a_pushed"
"""The key of the completion ``psych serve``'s push route sends to a Run's wait on a peer
task when the peer pushed an update of it: the Run reads the task now (its value is the
task id)."""
A2A_QUESTION_TOKEN = "input-required:"
"""Prefix of the ``wait_token`` of a call whose peer asked for input and whose Run puts
the question to its person (``A2aToolCall.questions_to_person``): the task id follows."""


def _compact_peer(peer: A2APeer) -> dict[str, Any]:
    return peer.model_dump(mode="json", exclude_defaults=True)


class _OnePeer(_Payload):
    """A payload naming one peer and the Scope it is called for, both sent compact."""

    @field_serializer("peer", check_fields=False)
    def _peer(self, peer: A2APeer) -> dict[str, Any]:
        return _compact_peer(peer)

    @field_serializer("scope", check_fields=False)
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class A2aCardsInput(_Payload):
    """``psych.a2a.cards``: this turn's peer skills of a Run with ``a2a_peers``.

    The activity fetches each peer's Agent Card (or reads the worker's cache for the
    Scope), narrows its skills by ``allow``, names them ``<peer>__<skill>`` and stores the
    base definitions plus one definition per offered skill as one blob for the model call.
    """

    run_id: str
    turn: int
    peers: tuple[A2APeer, ...]
    scope: Scope
    base_tools_ref: BlobRef | None = None
    """The Run's other definitions (code, HTTP, built-ins: ``ToolCatalog.tools_ref``)."""
    known_hash: str | None = None
    """The ``cards_hash`` the workflow already holds: when this turn's is the same, the
    result leaves out ``tools_ref`` and ``entries``."""

    @field_serializer("peers")
    def _peers(self, peers: tuple[A2APeer, ...]) -> list[dict[str, Any]]:
        return [_compact_peer(peer) for peer in peers]

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class A2aPeerStatus(_Payload):
    """One peer's part of a turn's catalogue."""

    peer: str
    status: Literal["ok", "unavailable"]
    skills: tuple[str, ...] = ()
    """The peer's own ids of the skills offered this turn (after ``allow``)."""
    card_hash: str | None = None
    """Content hash of the card as fetched (16 hex digits of sha256)."""
    cached: bool = False
    """True when the worker's cache answered instead of the peer."""
    error: str | None = None
    """Why it is unavailable (never carries a credential)."""


class A2aCards(_Payload):
    """A turn's catalogue: base tools plus one tool per offered peer skill."""

    cards_hash: str
    """Hash of ``tools_ref``, ``entries`` and the statuses (``cached`` aside)."""
    tools_ref: BlobRef | None = None
    entries: tuple[CatalogEntry, ...] | None = None
    """The peer skill entries; None = unchanged since ``known_hash``."""
    peers: tuple[A2aPeerStatus, ...] = ()


class A2aToolCall(_OnePeer):
    """``psych.tool.a2a``: one message to a peer, for one of its skills."""

    run_id: str
    call_id: str
    peer: A2APeer
    skill: str
    """The skill's id on the peer's card (sent as the message's ``skill`` metadata)."""
    name: str
    """The name the model called it by (``<peer>__<skill>``): what tool-call hooks match."""
    arguments: dict[str, Any]
    large_result_bytes: int
    scope: Scope
    report_through_client: bool = False
    """Report the outcome through the worker's client (a peer message is not safe to
    repeat, so a call whose worker died is UNKNOWN rather than sent twice)."""
    questions_to_person: bool = False
    """The Run's person answers the peer's questions (``may_ask_questions``): a task that
    asks for input comes back as a ``wait`` outcome, its token ``A2A_QUESTION_TOKEN`` +
    the task id, its content the peer's question; else the model reads the question."""
    answer: int = 0
    """0 for the model's call; n for the person's n-th answer sent in the call's task (the
    message id gets ``/answer-<n>``, so each is a message of its own to the peer)."""


class A2aPollInput(_OnePeer):
    """``psych.a2a.poll``: read a peer task the peer left working (``GetTask``; safe to
    repeat). The outcome has status ``wait`` while the task is still working, else it is
    the call's answer, after the post hooks."""

    run_id: str
    call_id: str
    peer: A2APeer
    skill: str
    name: str
    """The name the model called it by (``<peer>__<skill>``): what post hooks match."""
    task_id: str
    arguments: dict[str, Any]
    """The call's arguments (what the hooks are shown)."""
    large_result_bytes: int
    scope: Scope
    questions_to_person: bool = False
    """As for ``A2aToolCall``: a task asking for input is a ``wait`` whose token is
    ``A2A_QUESTION_TOKEN`` + the task id, its content the question."""


class A2aCancelInput(_OnePeer):
    """``psych.a2a.cancel``: ask the peer to cancel a task the Run waited on and will no
    longer read (``CancelTask``; best effort: its failure is data)."""

    run_id: str
    call_id: str
    peer: A2APeer
    task_id: str
    scope: Scope


class A2aCancelled(_Payload):
    """What the peer made of ``CancelTask``."""

    state: str | None = None
    """The task's state after it answered (``canceled``, or a state it had already ended
    in); None when it could not be asked."""
    error: str | None = None
    """Why it could not be cancelled (the peer's error, or why it was unreachable)."""
