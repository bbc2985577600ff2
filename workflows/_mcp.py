"""MCP servers at turn boundaries: what a turn offers, fixed within the turn.

An agent's turn resolves its MCP catalogue inside its model call (``McpTurn`` in the
input, ``McpTurnResult`` in the result: the hash, the statuses when they changed, and the
entries of the MCP tools the model called), so a turn's discovery adds no event to
history. A workflow's tool step has no model call: it asks ``psych.mcp.list_tools`` (a
local activity, one marker in history) before the step. Either way the worker discovers or
reads its cache, narrows and names the tools; replay reads history and never talks to a
server.

A non-optional server that is unreachable fails the Run naming it; an optional one is left
out and the model is told when it goes away and when it comes back. Deferred servers (a
catalogue over the worker's preload budget, or ``preload: false``) offer only the tools
``search_mcp_tools`` found, from the turn after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        CatalogEntry,
        ChatMessage,
        McpCatalog,
        McpCatalogInput,
        McpServerStatus,
        McpTurn,
        McpTurnResult,
        ToolCatalog,
    )
    from psych_runtime.specs import McpServer, Scope
    from psych_runtime.workflows import _activity_calls as calls
    from psych_runtime.workflows._outcome import Stop
    from psych_runtime.workflows._record_log import RecordLog
    from psych_runtime.workflows._records import McpDiscovered, RunStatus
    from psych_runtime.workflows._run_base import cause_text

SEARCH_TOOL = "search_mcp_tools"
"""The built-in a deferred server's tools are found through (offered by the activity)."""


@dataclass
class McpState:
    """What a Run knows of its MCP servers between turns (workflow state, not history)."""

    servers: dict[str, McpServer] = field(default_factory=dict)
    catalog_hash: str | None = None
    tools_ref: str | None = None
    entries: dict[str, CatalogEntry] = field(default_factory=dict)
    loaded: list[str] = field(default_factory=list)
    """Deferred servers' tools found by ``search_mcp_tools``, in the order found."""
    unavailable: set[str] = field(default_factory=set)
    deferred: tuple[str, ...] = ()
    catalogs: dict[str, str] = field(default_factory=dict)
    """Server name -> the ref of its stored catalogue this turn (what a search reads)."""
    statuses: tuple[McpServerStatus, ...] = ()
    """Each server's status at the last change of the catalogue (agent turns)."""


def turn_input(state: McpState) -> McpTurn | None:
    """What an agent's model call needs to resolve this turn's MCP tools (None: no servers)."""
    if not state.servers:
        return None
    return McpTurn(
        servers=tuple(state.servers.values()),
        loaded=tuple(state.loaded),
        known_hash=state.catalog_hash,
        have=tuple(sorted(state.entries)),
        told_unavailable=tuple(sorted(state.unavailable)),
    )


def take_turn(state: McpState, result: McpTurnResult, *, turn: int, log: RecordLog) -> None:
    """Take in what an agent turn's model call found, and record it per server."""
    changed = result.catalog_hash != state.catalog_hash
    if changed:
        state.catalog_hash = result.catalog_hash
        state.entries = {}
        state.statuses = result.servers
    state.entries.update({entry.name: entry for entry in result.entries})
    fresh = set(result.fresh)
    for status in state.statuses:
        was_cached = status.cached if changed else status.server not in fresh
        _record(log, turn, status, was_cached, result.renamed)
    # The activity told the model of every optional server it found down and not told yet.
    state.unavailable = {s.server for s in state.statuses if s.status == "unavailable"}
    state.deferred = tuple(s.server for s in state.statuses if s.status == "deferred")
    state.catalogs = {s.server: s.catalog_hash for s in state.statuses if s.catalog_hash}


@dataclass(frozen=True)
class Turn:
    """One turn's catalogue: the definitions blob, the entries by name, notes for the model."""

    tools_ref: str | None
    offered: dict[str, CatalogEntry]
    notes: list[ChatMessage | str]


async def refresh(
    state: McpState,
    base: ToolCatalog,
    *,
    run_id: str,
    turn: int,
    scope: Scope,
    log: RecordLog,
) -> Turn:
    """Resolve a workflow step's catalogue (the base one alone when the Run has no servers).

    Raises:
        Stop: FAILED when a non-optional server is unreachable or discovery itself failed.
    """
    offered = {entry.name: entry for entry in base.entries}
    if not state.servers:
        return Turn(base.tools_ref, offered, [])
    try:
        result = await calls.list_mcp_tools(
            McpCatalogInput(
                run_id=run_id,
                turn=turn,
                servers=tuple(state.servers.values()),
                scope=scope,
                base_tools_ref=base.tools_ref,
                loaded=tuple(state.loaded),
                known_hash=state.catalog_hash,
            )
        )
    except ActivityError as err:
        raise Stop(RunStatus.FAILED, f"MCP discovery failed: {cause_text(err)}") from err
    _take(state, result)
    notes: list[ChatMessage | str] = []
    for status in result.servers:
        _record(log, turn, status, status.cached, result.renamed)
        note = _availability(state, status)
        if note is not None:
            notes.append(ChatMessage(role="user", content=note))
    state.deferred = tuple(s.server for s in result.servers if s.status == "deferred")
    state.catalogs = {s.server: s.catalog_hash for s in result.servers if s.catalog_hash}
    offered.update(state.entries)
    return Turn(state.tools_ref or base.tools_ref, offered, notes)


def _record(
    log: RecordLog,
    turn: int,
    status: McpServerStatus,
    cached: bool,
    renamed: tuple[tuple[str, str, str], ...],
) -> None:
    """One server's ``McpDiscovered`` record of a turn."""
    log.add(
        McpDiscovered(
            **log.stamp(),
            turn=turn,
            server=status.server,
            status=status.status,
            tools=status.tools,
            catalog_hash=status.catalog_hash,
            cached=cached,
            error=status.error,
            renamed=tuple(r for r in renamed if r[1] == status.server),
        )
    )


def _take(state: McpState, result: McpCatalog) -> None:
    state.catalog_hash = result.catalog_hash
    if result.entries is not None:
        # A changed catalogue: the activity sent it whole.
        state.tools_ref = result.tools_ref
        state.entries = {entry.name: entry for entry in result.entries}


def _availability(state: McpState, status: McpServerStatus) -> str | None:
    """The note the model reads when an optional server goes away or comes back.

    Raises:
        Stop: FAILED for a non-optional server that is unreachable.
    """
    name = status.server
    if status.status == "unavailable":
        if not state.servers[name].optional:
            raise Stop(RunStatus.FAILED, f"MCP server {name!r} is unreachable: {status.error}")
        if name in state.unavailable:
            return None
        state.unavailable.add(name)
        return (
            f"[runtime] MCP server {name!r} is unavailable ({status.error}); its tools are "
            "not offered until it answers again."
        )
    if name in state.unavailable:
        state.unavailable.discard(name)
        return f"[runtime] MCP server {name!r} answers again; its tools are offered."
    return None
