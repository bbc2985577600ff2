"""An agent turn's MCP discovery, done by the model-call activity before it calls the model.

Resolving the catalogue inside the model call (rather than in an activity of its own
before it) costs a turn no history event: the turn's catalogue is the hash in the model
call's result, the entries of the MCP tools the model called, and, only when something
changed, each server's status. A workflow tool step, which has no model call, asks
``psych.mcp.list_tools`` instead; both go through ``McpActivities.resolve``.

Imports nothing of the ``mcp`` SDK: the resolver is handed in (``McpResolver``), so a
worker without MCP servers never loads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from psych_runtime.activities.contract import (
    ChatMessage,
    McpCatalog,
    McpCatalogInput,
    McpTurn,
    McpTurnResult,
    ModelCallInput,
)


class McpResolver(Protocol):
    """What resolves a turn's catalogue (``McpActivities``)."""

    async def resolve(self, input: McpCatalogInput) -> McpCatalog:
        """The whole catalogue of ``input``'s servers for this turn."""
        ...


class McpUnreachable(Exception):
    """A non-optional MCP server did not answer: the turn's model call is not made."""


@dataclass(frozen=True)
class Resolved:
    """A turn's catalogue and the notes the model reads before its call."""

    catalog: McpCatalog
    notes: tuple[ChatMessage, ...]


async def resolve_turn(resolver: McpResolver | None, input: ModelCallInput) -> Resolved:
    """Resolve ``input.mcp`` (the caller checked it is set).

    Raises:
        McpUnreachable: a non-optional server is unavailable (its name and the error), or
            this worker has no MCP resolver wired.
    """
    turn = input.mcp
    assert turn is not None
    if resolver is None:
        raise McpUnreachable(
            "this worker cannot reach MCP servers: its ModelActivities were built without "
            "McpActivities (build_worker wires them)"
        )
    catalog = await resolver.resolve(
        McpCatalogInput(
            run_id=input.run_id,
            turn=input.turn,
            servers=turn.servers,
            scope=input.scope,
            base_tools_ref=input.tools_ref,
            loaded=turn.loaded,
        )
    )
    optional = {server.name: server.optional for server in turn.servers}
    told = set(turn.told_unavailable)
    notes: list[ChatMessage] = []
    for status in catalog.servers:
        name = status.server
        if status.status == "unavailable":
            if not optional[name]:
                raise McpUnreachable(f"MCP server {name!r} is unreachable: {status.error}")
            if name not in told:
                notes.append(
                    _note(
                        f"MCP server {name!r} is unavailable ({status.error}); its "
                        "tools are not offered until it answers again."
                    )
                )
        elif name in told:
            notes.append(_note(f"MCP server {name!r} answers again; its tools are offered."))
    return Resolved(catalog, tuple(notes))


def turn_result(resolved: Resolved, turn: McpTurn, called: Iterable[str]) -> McpTurnResult:
    """What the workflow is told: the hash, the statuses when they changed, and the entries
    of the tools the model called that it does not hold yet."""
    catalog = resolved.catalog
    unchanged = catalog.catalog_hash == turn.known_hash
    held = set(turn.have) if unchanged else set()
    by_name = {entry.name: entry for entry in catalog.entries or ()}
    wanted = sorted({name for name in called if name in by_name and name not in held})
    return McpTurnResult(
        catalog_hash=catalog.catalog_hash,
        servers=() if unchanged else catalog.servers,
        fresh=tuple(s.server for s in catalog.servers if not s.cached) if unchanged else (),
        entries=tuple(by_name[name] for name in wanted),
        renamed=() if unchanged else catalog.renamed,
    )


def _note(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=f"[runtime] {text}")
