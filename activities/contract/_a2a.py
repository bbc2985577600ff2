"""The A2A peer payloads: a turn's catalogue of peer skills (``psych.a2a.cards``) and one
message sent to a peer (``psych.tool.a2a``)."""

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


def _compact_peer(peer: A2APeer) -> dict[str, Any]:
    return peer.model_dump(mode="json", exclude_defaults=True)


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


class A2aToolCall(_Payload):
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

    @field_serializer("peer")
    def _peer(self, peer: A2APeer) -> dict[str, Any]:
        return _compact_peer(peer)

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class A2aPollInput(_Payload):
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

    @field_serializer("peer")
    def _peer(self, peer: A2APeer) -> dict[str, Any]:
        return _compact_peer(peer)

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)
