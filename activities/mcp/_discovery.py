"""A turn's MCP catalogue: each server's tools discovered (or read from the worker's cache),
narrowed by what the Run's tenant is permitted (``TenantPermits``) and by ``allow``, named
``<server>__<tool>``, deferred past the preload budget, and stored with the Run's other
definitions. The catalogue half of ``McpActivities``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mcp_types
from mcp.client import Client

from psych_runtime.activities.blobs import BlobStore, canonical_json, read_by_ref
from psych_runtime.activities.contract import (
    CatalogEntry,
    McpCatalog,
    McpCatalogInput,
    McpServerStatus,
    PolicyDecision,
    ToolDefinition,
    ToolInfo,
)
from psych_runtime.activities.mcp._catalog import (
    SEARCH_TOOL,
    CatalogCache,
    Freshness,
    McpTool,
    NamedTool,
    StoredCatalog,
    definitions_chars,
    search_definition,
)
from psych_runtime.activities.mcp._connect import Connection, Unavailable, connect, failure_reason
from psych_runtime.activities.mcp._consent import asking, consent_needed
from psych_runtime.activities.mcp._names import allowed_tools, name_tools
from psych_runtime.activities.mcp._oauth import OAuthClients
from psych_runtime.activities.mcp._pool import McpSessions, SessionBroke, unless_told
from psych_runtime.activities.mcp._settings import McpSettings
from psych_runtime.activities.secrets import Redactor, SecretResolver
from psych_runtime.activities.tools import OUTAGE_MARGIN, Policy, fixed_decision
from psych_runtime.specs import (
    McpServer,
    PermitSource,
    Scope,
    StoreUnavailable,
    TenantPermits,
    permitted_by,
    port_failure,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Discovered:
    server: McpServer
    tools: tuple[McpTool, ...]
    """Narrowed by the tenant's permits and ``allow``, sorted by the server's name for them."""
    cached: bool
    listing: tuple[McpTool, ...]
    """The whole listing as the worker's cache holds it (the same object until it changes)."""
    unmatched: tuple[str, ...] = ()
    """``allow`` entries naming none of the listed tools."""


@dataclass(frozen=True)
class _PortFailed:
    """Why the permits port could not say what the tenant is permitted of a server."""

    reason: str


async def _unasked(failed: _PortFailed) -> str:
    """The outcome of a server whose permits are unknown: unavailable, never contacted."""
    return failed.reason


_BUILT_MAX = 256
"""Turn catalogues a worker keeps built (least recently used dropped first)."""

Permitted = tuple[str, ...] | None
"""What the tenant is permitted of one server (None: no restriction)."""
_MemoKey = tuple[
    str, str | None, str | None, tuple[str, ...], tuple[str, ...], tuple[Permitted, ...]
]


def _memo_key(input: McpCatalogInput, permitted: tuple[Permitted, ...]) -> _MemoKey:
    """What a built catalogue depends on besides the listings: whose (the blobs it stored
    are sealed per tenant), the base tools, the found names, the servers as declared and
    what the tenant is permitted of each (the port may answer differently over time)."""
    return (
        input.scope.tenant,
        input.scope.principal,
        input.base_tools_ref,
        input.loaded,
        tuple(server.model_dump_json() for server in input.servers),
        permitted,
    )


def _with_cached(catalog: McpCatalog, cached: tuple[bool, ...]) -> McpCatalog:
    """``catalog`` with each server's ``cached`` flag of this turn."""
    servers = tuple(
        status.model_copy(update={"cached": flag})
        for status, flag in zip(catalog.servers, cached, strict=True)
    )
    return catalog.model_copy(update={"servers": servers})


def _catalog_hash(
    tools_ref: str | None, entries: Iterable[CatalogEntry], statuses: Iterable[McpServerStatus]
) -> str:
    """What a turn's catalogue is, short: the offered definitions, the entries and each
    server's status (whether its cache answered aside, which changes nothing offered).
    64 bits of sha256: it only tells a turn's catalogue from the Run's previous one, and it
    costs history bytes on every turn."""
    body = json.dumps(
        {
            "tools_ref": tools_ref,
            "entries": [entry.model_dump(mode="json") for entry in entries],
            "servers": [s.model_dump(mode="json", exclude={"cached"}) for s in statuses],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode()).hexdigest()[:16]


class Catalogues:
    """The catalogue side of ``McpActivities`` (which sets these attributes): ``resolve`` and
    the discovery, cache and naming behind it."""

    blobs: BlobStore
    secrets: SecretResolver | None
    oauth: OAuthClients | None
    policy: Policy
    settings: McpSettings
    permits: TenantPermits | None
    catalogs: CatalogCache
    sessions: McpSessions
    _outage_seconds: float
    _built: OrderedDict[_MemoKey, tuple[tuple[tuple[McpTool, ...], ...], McpCatalog]]

    async def resolve(self, input: McpCatalogInput) -> McpCatalog:
        """A turn's whole catalogue: each server discovered (or cached), narrowed and named.

        A server over the preload budget (or with ``preload: false``) is deferred: of its
        tools only those named in ``input.loaded`` are offered, plus ``search_mcp_tools``
        once per catalogue. An unreachable server, or one whose permits the port could not
        say (it raised, misanswered, or did not answer in time), is reported unavailable,
        not raised: left out if optional, the Run failed naming why if not. The stored
        definitions are the base ones plus the offered MCP ones, sorted by name. Also
        what the model-call activity calls for an agent's turn (``McpTurn``).
        """
        asked = await asyncio.gather(
            *(self._asked(input.scope.tenant, server) for server in input.servers)
        )
        outcomes = await asyncio.gather(
            *(
                self._discover(server, input.scope, granted)
                if not isinstance(granted, _PortFailed)
                else _unasked(granted)
                for server, granted in zip(input.servers, asked, strict=True)
            )
        )
        if not all(isinstance(found, _Discovered) for found in outcomes):
            return await self._build(input, outcomes)
        permitted = tuple(granted for granted in asked if not isinstance(granted, _PortFailed))
        listings = tuple(found.listing for found in outcomes if isinstance(found, _Discovered))
        cached = tuple(found.cached for found in outcomes if isinstance(found, _Discovered))
        key = _memo_key(input, permitted)
        hit = self._built.get(key)
        # The same listing objects the cache handed out: nothing a turn offers has changed
        # since (a refresh or list_changed makes new ones), so the turn's catalogue is the
        # one built then, whatever the cache flags say now. Saves rebuilding and storing
        # every definition on every turn (~5 ms for 40 tools).
        if hit is not None and all(a is b for a, b in zip(hit[0], listings, strict=True)):
            self._built.move_to_end(key)
            return _with_cached(hit[1], cached)
        catalog = await self._build(input, outcomes)
        self._built[key] = (listings, catalog)
        while len(self._built) > _BUILT_MAX:
            self._built.popitem(last=False)
        return catalog

    async def _build(
        self, input: McpCatalogInput, outcomes: Sequence[_Discovered | str]
    ) -> McpCatalog:
        base = await self._base_definitions(input.base_tools_ref)
        available = [found for found in outcomes if isinstance(found, _Discovered)]
        naming = name_tools(
            ((found.server.name, tool.tool) for found in available for tool in found.tools),
            reserved=[definition.name for definition in base] + [SEARCH_TOOL],
        )
        loaded = set(input.loaded)
        definitions = list(base)
        entries: list[CatalogEntry] = []
        statuses: list[McpServerStatus] = []
        deferred: list[str] = []
        offered_pairs: set[tuple[str, str]] = set()
        for server, found in zip(input.servers, outcomes, strict=True):
            if isinstance(found, str):
                statuses.append(
                    McpServerStatus(server=server.name, status="unavailable", error=found)
                )
                continue
            named = [(naming.names[(server.name, tool.tool)], tool) for tool in found.tools]
            stored = StoredCatalog(
                server=server.name,
                tools=tuple(NamedTool(name=name, spec=tool) for name, tool in named),
            )
            catalog_ref = await self.blobs.put(canonical_json(stored.model_dump(mode="json")))
            is_deferred = self._deferred(server, found.tools)
            if is_deferred:
                deferred.append(server.name)
                named = [(name, tool) for name, tool in named if name in loaded]
            for name, tool in named:
                definitions.append(tool.definition(name))
                entries.append(self._entry(server.name, name, tool))
                offered_pairs.add((server.name, tool.tool))
            statuses.append(
                McpServerStatus(
                    server=server.name,
                    status="deferred" if is_deferred else "ok",
                    tools=len(named),
                    catalog_hash=catalog_ref,
                    cached=found.cached,
                    unmatched=found.unmatched,
                )
            )
        if deferred:
            definitions.append(search_definition(deferred))
            entries.append(
                CatalogEntry(
                    name=SEARCH_TOOL,
                    kind="builtin",
                    safe_to_repeat=True,
                    info=ToolInfo(name=SEARCH_TOOL, kind="builtin", read_only=True),
                    policy=PolicyDecision(decision="allow", reason="built-in"),
                )
            )
        definitions.sort(key=lambda definition: definition.name)
        entries.sort(key=lambda entry: entry.name)
        data = canonical_json([definition.model_dump(mode="json") for definition in definitions])
        # The store's ref, not the plaintext's hash: an EncryptedBlobStore names a blob by
        # the hash of its sealed bytes.
        tools_ref = await self.blobs.put(data) if definitions else None
        catalog_hash = _catalog_hash(tools_ref, entries, statuses)
        renamed = tuple(
            triple for triple in naming.renamed if (triple[1], triple[2]) in offered_pairs
        )
        return McpCatalog(
            catalog_hash=catalog_hash,
            tools_ref=tools_ref,
            entries=tuple(entries),
            servers=tuple(statuses),
            renamed=renamed,
        )

    async def _base_definitions(self, ref: str | None) -> list[ToolDefinition]:
        if ref is None:
            return []
        data = json.loads(await read_by_ref(self.blobs, ref, "the Run's own tool definitions"))
        return [ToolDefinition.model_validate(item) for item in data]

    def _deferred(self, server: McpServer, tools: Sequence[McpTool]) -> bool:
        if server.preload is not None:
            return not server.preload
        return definitions_chars(tools) > self.settings.preload_budget_chars

    def _entry(self, server: str, name: str, tool: McpTool) -> CatalogEntry:
        info = ToolInfo(
            name=name, kind="mcp", read_only=tool.read_only, destructive=tool.destructive
        )
        safe = tool.safe_to_repeat
        return CatalogEntry(
            name=name,
            kind="mcp",
            safe_to_repeat=safe,
            info=info,
            policy=fixed_decision(self.policy, info),
            heartbeat_timeout_seconds=self._lost_after(safe),
            server=server,
            tool=tool.tool,
        )

    def _lost_after(self, safe_to_repeat: bool) -> float | None:
        """The heartbeat timeout a tool's calls get (None: the workflow's default)."""
        if safe_to_repeat or self._outage_seconds <= 0:
            return None
        return self._outage_seconds + OUTAGE_MARGIN

    async def permitted(self, tenant: str, server: McpServer) -> Permitted:
        """What ``tenant`` is permitted of ``server``'s tools (None: no restriction)."""
        return await permitted_by(self.permits, tenant, PermitSource.of_server(server))

    async def _asked(self, tenant: str, server: McpServer) -> Permitted | _PortFailed:
        """``permitted``, or why the port could not say (it raised, misanswered, or gave
        no answer in time): the server is then unavailable for the turn, as one that does
        not answer (left out if optional, the Run failed naming it if not)."""
        try:
            return await self.permitted(tenant, server)
        except Exception as err:
            reason = port_failure(tenant, err)
            _log.warning("MCP server %s is unavailable: %s", server.name, reason, exc_info=True)
            return _PortFailed(reason)

    async def _discover(
        self, server: McpServer, scope: Scope, permitted: Permitted
    ) -> _Discovered | str:
        """The server's narrowed tools, or why it is unavailable (redacted). A server the
        tenant is permitted nothing of offers nothing and is never connected to: no
        listing, no credential sent, no consent asked for it."""
        if permitted == ():
            return _Discovered(server=server, tools=(), cached=False, listing=(), unmatched=())
        redact = Redactor()
        connection: Connection | None = None
        with asking():  # the listing's own consent, never a call's of the same key
            try:
                connection = await self._connection(server, scope)
                redact = connection.redact
                tools, cached = await self._listing(server, connection)
            except StoreUnavailable:
                raise  # the worker's token store, not the server: transient, never "unavailable"
            except Exception as err:
                if connection is not None and connection.consent is not None:
                    consents = None if self.oauth is None else self.oauth.consents
                    needed = await consent_needed(consents, connection.consent, server.name)
                    if needed is not None:
                        raise needed from None
                reason = redact(failure_reason(err))
                _log.warning("MCP server %s is unavailable: %s", server.name, reason)
                return reason
        names = [tool.tool for tool in tools]
        allowed = set(allowed_tools(names, server.allow, permitted))
        narrowed = tuple(tool for tool in tools if tool.tool in allowed)
        unmatched = tuple(entry for entry in server.allow if not allowed_tools(names, (entry,)))
        if unmatched and not cached:
            _log.warning(
                "MCP server %s: allow entries %s name none of the tools it lists",
                server.name,
                ", ".join(map(repr, unmatched)),
            )
        return _Discovered(
            server=server, tools=narrowed, cached=cached, listing=tools, unmatched=unmatched
        )

    async def _listing(
        self, server: McpServer, connection: Connection
    ) -> tuple[tuple[McpTool, ...], bool]:
        cached = self.catalogs.get(connection.key)
        if cached is not None:
            return cached, True
        generation = self.catalogs.generation()
        try:
            tools, freshness = await self._list_on_session(server, connection)
        except SessionBroke as err:
            if not err.reused:
                raise
            # A pooled session that broke since its last use (its server restarted, the
            # stream was cut) fails at once; listing is read-only, so it is asked again on
            # a fresh session. A tools/call never is: it may have reached the server.
            tools, freshness = await self._list_on_session(server, connection)
        self.catalogs.put(connection.key, tools, generation, freshness)
        return tools, False

    async def _list_on_session(
        self, server: McpServer, connection: Connection
    ) -> tuple[tuple[McpTool, ...], Freshness | None]:
        bound = self.settings.list_timeout_seconds
        async with self.sessions.client(
            connection.key, server.url, connection.headers, connection.auth
        ) as client:
            try:
                async with asyncio.timeout(bound):
                    # A POST of it failing on an SSE session is never answered: stopped at
                    # once with its own error (12-07: it waited out the bound).
                    return await unless_told(self._all_pages(client))
            except TimeoutError:
                raise Unavailable(
                    f"tools/list gave no complete answer within {bound:g} s"
                ) from None

    async def _all_pages(self, client: Client) -> tuple[tuple[McpTool, ...], Freshness | None]:
        """Every page's tools, and how long the server says the listing stays fresh."""
        tools: dict[str, McpTool] = {}
        pages: list[mcp_types.ListToolsResult] = []
        cursor: str | None = None
        for _ in range(self.settings.max_list_pages):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            pages.append(page)
            for tool in page.tools:
                tools.setdefault(tool.name, McpTool.of(tool))
            cursor = page.next_cursor
            if cursor is None:
                return tuple(tools[name] for name in sorted(tools)), Freshness.of(pages)
        raise Unavailable(f"tools/list did not end within {self.settings.max_list_pages} pages")

    async def _connection(self, server: McpServer, scope: Scope) -> Connection:
        return await connect(server, scope, self.secrets, self.oauth)
