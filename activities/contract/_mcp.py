"""The MCP payloads: a turn's catalogue (``psych.mcp.list_tools``, or resolved inside the
model call as ``McpTurn``), one ``tools/call`` and the search of deferred catalogues."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_serializer

from psych_runtime.activities.contract._base import (
    _Compact,
    _compact_server,
    _Payload,
)
from psych_runtime.activities.contract._mcp_input import McpInputAnswers
from psych_runtime.activities.contract._refs import BlobRef
from psych_runtime.activities.contract._tools import CatalogEntry, ToolOutcome
from psych_runtime.specs import McpServer, Scope


class McpTurn(_Compact):
    """An agent turn's MCP servers, resolved by the model-call activity before it calls the
    model (so a turn's discovery costs no event of its own in history).

    The activity discovers each server (or reads the worker's cache), narrows and names the
    tools exactly as ``psych.mcp.list_tools`` does, and offers the model the base tools
    (``ModelCallInput.tools_ref``) plus those MCP tools.
    """

    servers: tuple[McpServer, ...]
    loaded: tuple[str, ...] = ()
    """Deferred servers' tools ``search_mcp_tools`` found (offered from the next turn)."""
    known_hash: str | None = None
    """The ``catalog_hash`` of the Run's previous turn."""
    have: tuple[str, ...] = ()
    """Names whose entries the workflow already holds for ``known_hash``: not sent again."""
    told_unavailable: tuple[str, ...] = ()
    """Optional servers the model was already told are unavailable (told once, until back)."""

    @field_serializer("servers")
    def _servers(self, servers: tuple[McpServer, ...]) -> list[dict[str, Any]]:
        return [_compact_server(server) for server in servers]


class McpTurnResult(_Compact):
    """What the turn's MCP discovery found, as the workflow needs it."""

    catalog_hash: str
    """Hash of the offered definitions, entries and statuses (``cached`` aside)."""
    servers: tuple[McpServerStatus, ...] = ()
    """Each server's status; empty when ``catalog_hash`` equals ``known_hash`` (then the
    workflow's are still true and ``cached`` says what the cache answered)."""
    fresh: tuple[str, ...] = ()
    """When unchanged: the servers whose tools came from the server this turn rather than
    the worker's cache (usually none, so usually left out on the wire)."""
    entries: tuple[CatalogEntry, ...] = ()
    """Entries of the offered MCP tools (and ``search_mcp_tools``) the model called this
    turn that ``have`` does not name: what the workflow needs to run those calls."""
    renamed: tuple[tuple[str, str, str], ...] = ()
    """``(model name, server, tool)`` for rewritten names (left out when unchanged)."""


class McpCatalogInput(_Payload):
    """``psych.mcp.list_tools``: this turn's catalogue of a Run with MCP servers.

    The activity discovers each server (``initialize`` + every ``tools/list`` page, or the
    worker's cache), narrows by ``allow``, names the tools ``<server>__<tool>`` and stores
    the base definitions plus the offered MCP ones as one blob for the model call.
    """

    run_id: str
    turn: int
    servers: tuple[McpServer, ...]
    scope: Scope
    base_tools_ref: BlobRef | None = None
    """The Run's other definitions (code, HTTP, built-ins: ``ToolCatalog.tools_ref``)."""
    loaded: tuple[str, ...] = ()
    """Model-facing names of deferred servers' tools that ``search_mcp_tools`` found:
    offered from the turn after they were found."""
    known_hash: str | None = None
    """The ``catalog_hash`` the workflow already holds: when this turn's is the same, the
    result leaves out ``tools_ref`` and ``entries`` (a few bytes of history per turn)."""


class McpServerStatus(_Payload):
    """One server's part of a turn's catalogue."""

    server: str
    status: Literal["ok", "deferred", "unavailable"]
    """``deferred``: its catalogue is over the worker's preload budget (or ``preload`` is
    false), so only the tools found through ``search_mcp_tools`` are offered."""
    tools: int = 0
    """Tools offered this turn (after ``allow``)."""
    catalog_hash: str | None = None
    """Content hash of the server's narrowed definitions."""
    cached: bool = False
    """True when the worker's cache answered instead of the server."""
    error: str | None = None
    """Why it is unavailable (never carries a credential)."""
    unmatched: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    """The server's ``allow`` entries that name none of the tools it lists (they grant
    nothing), in ``allow``'s order. Left out when empty, so a payload without any reads
    as before (and an older worker can read it)."""


class McpCatalog(_Payload):
    """A turn's catalogue: base tools plus the MCP tools offered."""

    catalog_hash: str
    """Hash of ``tools_ref`` and ``entries``; equal to the input's ``known_hash`` when
    nothing changed, and then the two are left out."""
    tools_ref: BlobRef | None = None
    entries: tuple[CatalogEntry, ...] | None = None
    """The MCP entries (and ``search_mcp_tools`` when a server is deferred); None =
    unchanged since ``known_hash``."""
    servers: tuple[McpServerStatus, ...] = ()
    renamed: tuple[tuple[str, str, str], ...] = ()
    """``(model name, server, tool)`` for each tool whose name was sanitised, cut or
    suffixed to resolve a collision (left out when unchanged)."""


class McpToolCall(_Compact):
    """``psych.tool.mcp``: one ``tools/call``."""

    run_id: str
    call_id: str
    server: McpServer
    tool: str
    """The tool's own name on the server."""
    arguments: dict[str, Any]
    large_result_bytes: int
    scope: Scope
    report_through_client: bool = False
    """Set for a tool not safe to repeat (``not CatalogEntry.safe_to_repeat``): its outcome
    is reported through the worker's client so it survives a server outage, like a POST
    tool's. Left out (the usual read-only call) on the wire."""
    name: str | None = None
    """The name the model called it by (``<server>__<tool>``, sanitised and cut, as the
    records show it): what tool-call hooks match. None (calls scheduled before it): the
    hooks match ``<server name>__<tool>``."""
    input: McpInputAnswers | None = None
    """A retried call: the answers to the server's ``input_required`` result, sent with the
    request (``inputResponses``, ``requestState``). None (left out): the first request."""

    @field_serializer("server")
    def _server(self, server: McpServer) -> dict[str, Any]:
        return _compact_server(server)


class McpSearchInput(_Payload):
    """``psych.mcp.search_tools``: search deferred servers' catalogues."""

    run_id: str
    call_id: str
    servers: tuple[McpServer, ...]
    """The deferred servers to search (the model may have named one)."""
    catalogs: dict[str, BlobRef] = Field(default_factory=dict)
    """Server name -> that server's ``McpServerStatus.catalog_hash`` this turn: the stored
    catalogue searched, holding the names the turn's catalogue gave its tools (so what is
    found is named as ``list_tools`` will offer it, and searching talks to no server). A
    server of ``servers`` without one is reported to the model as not searchable."""
    query: str
    limit: int = Field(default=10, ge=1, le=50)
    large_result_bytes: int
    scope: Scope


class McpSearchResult(_Payload):
    """What ``search_mcp_tools`` found: the model's message and the names to load."""

    outcome: ToolOutcome
    found: tuple[str, ...] = ()
    """Model-facing names made callable from the next turn."""
