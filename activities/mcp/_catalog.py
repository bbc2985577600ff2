"""What a server's catalogue is to the worker: its tools, the cache of them, and the search
of a deferred server's tools.

A server's tools are kept as the server listed them (``McpTool``: its own name, description,
input schema and annotation hints). The worker caches each session's listing for a TTL and
drops it when that session receives ``notifications/tools/list_changed``, or ends (idle,
over the pool's bound, broken: nobody hears the server's notifications for that key until a
session opens again); a listing that was in flight when either came is not cached (it may
predate the change).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mcp_types
from pydantic import BaseModel, ConfigDict

from psych_runtime.activities.contract import ToolDefinition
from psych_runtime.activities.mcp._pool import SessionKey

SEARCH_TOOL = "search_mcp_tools"
"""The built-in offered once per catalogue when a server is deferred."""


class McpTool(BaseModel):
    """One tool as its server lists it (annotation hints None when not given)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    """The server's own name for it (what ``tools/call`` is sent, what ``allow`` names)."""
    description: str
    parameters: dict[str, Any]
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None

    @classmethod
    def of(cls, tool: mcp_types.Tool) -> McpTool:
        """From the SDK's ``Tool``."""
        hints = tool.annotations
        read_only = None if hints is None else hints.read_only_hint
        return cls(
            tool=tool.name,
            description=tool.description or "",
            parameters=tool.input_schema,
            read_only=read_only,
            # The MCP spec's ToolAnnotations: destructiveHint means something only when
            # readOnlyHint is false, so a tool marked read-only is not destructive.
            destructive=None if hints is None or read_only else hints.destructive_hint,
            idempotent=None if hints is None else hints.idempotent_hint,
        )

    @property
    def safe_to_repeat(self) -> bool:
        """Read-only or idempotent by the server's word; unannotated tools are writes."""
        return bool(self.read_only or self.idempotent)

    def definition(self, name: str) -> ToolDefinition:
        """The definition the model is shown, under its model-facing ``name``."""
        return ToolDefinition(name=name, description=self.description, parameters=self.parameters)


class NamedTool(BaseModel):
    """A tool of a stored server catalogue, with the name the model was shown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    spec: McpTool


class StoredCatalog(BaseModel):
    """One server's narrowed catalogue as stored (its ref is the server's catalog hash),
    kept so ``search_mcp_tools`` searches exactly what the turn's names were made from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str
    tools: tuple[NamedTool, ...]


def definitions_chars(tools: Iterable[McpTool]) -> int:
    """Characters the tools' definitions take as JSON (what preloading would cost)."""
    return sum(
        len(json.dumps([tool.tool, tool.description, tool.parameters], ensure_ascii=False))
        for tool in tools
    )


@dataclass
class _Entry:
    expires: float
    tools: tuple[McpTool, ...]


@dataclass(frozen=True)
class Freshness:
    """What a server said of its listing (2026-07-28 ``ttlMs`` / ``cacheScope``), taken
    over every page: the shortest TTL, and ``public`` only when every page said so."""

    ttl_seconds: float
    public: bool

    @classmethod
    def of(cls, pages: Sequence[mcp_types.ListToolsResult]) -> Freshness | None:
        """The listing's freshness, or None when a page carries no hints (a server of the
        handshake era, whose results the SDK reads with its own defaults)."""
        if not pages or any(
            not {"ttl_ms", "cache_scope"} <= page.model_fields_set for page in pages
        ):
            return None
        return cls(
            ttl_seconds=min(page.ttl_ms for page in pages) / 1000,
            public=all(page.cache_scope == "public" for page in pages),
        )


MAX_LISTINGS = 256
"""Listings a ``CatalogCache`` keeps in each of its two tables; past it the expired ones
go, then the least recently used (a listing of 30 tools is ~100 KB in memory)."""


class CatalogCache:
    """Each session key's last listing, for a TTL or until list_changed.

    The TTL is ``ttl`` (the worker's ``catalog_ttl_seconds``) unless the server gave its own
    (``Freshness``, at most ``max_ttl``); 0 from either side means never served from the
    cache. A listing is kept per session key, so per tenant, principal and credential,
    unless the server marked it ``public``: then it is kept once for every principal of the
    tenant reaching the server with the same credential (the key without its principal), in
    a table of its own, so a per-user listing is never served to another principal. Each
    table keeps at most ``max_listings``: a worker serving many principals over its life
    holds the recent ones, not every one it ever listed for.
    """

    def __init__(
        self, ttl: float, max_ttl: float | None = None, *, max_listings: int = MAX_LISTINGS
    ) -> None:
        """Keep listings ``ttl`` seconds (0: never serve from the cache); a server's own
        TTL is honoured up to ``max_ttl`` (default: ``ttl``).

        Raises:
            ValueError: ``max_listings`` is below 1.
        """
        if max_listings < 1:
            raise ValueError(f"max_listings must be at least 1, not {max_listings}")
        self._ttl = ttl
        self._max_ttl = ttl if max_ttl is None else max_ttl
        self._max_listings = max_listings
        self._entries: OrderedDict[SessionKey, _Entry] = OrderedDict()
        self._shared: OrderedDict[SessionKey, _Entry] = OrderedDict()
        self._drops = 0

    def get(self, key: SessionKey) -> tuple[McpTool, ...] | None:
        """The cached listing for ``key`` if it is still fresh (its own, else a public one)."""
        now = time.monotonic()
        for table, at in ((self._entries, key), (self._shared, _shared(key))):
            entry = table.get(at)
            if entry is None:
                continue
            if now >= entry.expires:
                del table[at]
                continue
            table.move_to_end(at)
            return entry.tools
        return None

    def generation(self) -> int:
        """A counter moved by every ``drop``: take it before listing, give it to ``put``
        (a listing taken across any key's drop is not kept; it is listed again next time)."""
        return self._drops

    def put(
        self,
        key: SessionKey,
        tools: tuple[McpTool, ...],
        generation: int,
        freshness: Freshness | None = None,
    ) -> None:
        """Cache a listing taken at ``generation``, unless a key was dropped since."""
        if self._ttl <= 0 or generation != self._drops:
            return
        ttl = self._ttl if freshness is None else min(freshness.ttl_seconds, self._max_ttl)
        if ttl <= 0:
            return
        entry = _Entry(time.monotonic() + ttl, tools)
        table, at = (
            (self._shared, _shared(key))
            if freshness is not None and freshness.public
            else (self._entries, key)
        )
        table[at] = entry
        table.move_to_end(at)
        if len(table) > self._max_listings:
            self._trim(table)

    def drop(self, key: SessionKey) -> None:
        """Forget ``key``'s listing, and the public one it shares (its server said the
        list changed)."""
        self._entries.pop(key, None)
        self._shared.pop(_shared(key), None)
        self._drops += 1

    def __len__(self) -> int:
        """Listings kept, own and public."""
        return len(self._entries) + len(self._shared)

    def _trim(self, table: OrderedDict[SessionKey, _Entry]) -> None:
        """Down to ``max_listings``: the expired first, then the least recently used."""
        now = time.monotonic()
        for at in [at for at, entry in table.items() if now >= entry.expires]:
            del table[at]
        while len(table) > self._max_listings:
            table.popitem(last=False)


def _shared(key: SessionKey) -> SessionKey:
    """Where a public listing is kept: the key without its principal."""
    return replace(key, principal=None)


def search_definition(deferred: Sequence[str]) -> ToolDefinition:
    """The built-in ``search_mcp_tools`` for the deferred servers named."""
    servers = ", ".join(deferred)
    return ToolDefinition(
        name=SEARCH_TOOL,
        description=(
            f"Search the tools of MCP servers whose catalogues are too large to list here "
            f"({servers}). Give words to look for in tool names and descriptions; the tools "
            "found are described in the result and become callable from your next turn."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words to look for in tool names and descriptions.",
                },
                "server": {
                    "type": "string",
                    "enum": list(deferred),
                    "description": "Search only this server (default: all of them).",
                },
            },
            "required": ["query"],
        },
    )


def search(tools: Iterable[NamedTool], query: str, limit: int) -> list[NamedTool]:
    """The tools whose name or description holds the query's words, case-insensitively.

    Tools holding more of the words come first, then by name; at most ``limit``. A query
    of no words finds nothing.
    """
    words = [word for word in query.lower().split() if word]
    scored: list[tuple[int, str, NamedTool]] = []
    for named in tools:
        text = f"{named.name} {named.spec.tool} {named.spec.description}".lower()
        hits = sum(1 for word in words if word in text)
        if hits:
            scored.append((-hits, named.name, named))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [named for _, _, named in scored[:limit]]


def found_text(found: Sequence[NamedTool], query: str, searched: Sequence[str]) -> str:
    """What the model reads after a search: each tool's name, description and schema."""
    where = ", ".join(searched) or "no server"
    if not found:
        return f"No tool of {where} matches {query!r}. Try other words."
    lines = [
        f"Found {len(found)} tool{'s' if len(found) != 1 else ''} of {where} for {query!r}; "
        "they are callable from your next turn:"
    ]
    for named in found:
        schema = json.dumps(named.spec.parameters, ensure_ascii=False, sort_keys=True)
        lines.append(f"\n- {named.name}: {named.spec.description}\n  parameters: {schema}")
    return "\n".join(lines)
