"""MCP activities: a turn's catalogue of MCP tools, one ``tools/call``, and the search of
deferred servers' catalogues (the built-in ``search_mcp_tools``).

Servers are reached through the official ``mcp`` SDK over streamable HTTP or SSE with the
``initialize`` handshake, on sessions the worker pools per (tenant, principal, url,
transport, credential identity) (``_mcp_pool.py``). A server's credential is a name the
``SecretResolver`` turns into ``Authorization: Bearer <secret>`` for the Scope at hand; the
value is used to connect and hashed into the pool key, and every text derived from the
server (results, errors, log lines) is passed through a ``Redactor`` holding it.

What the model should read comes back as data: an unreachable server is a
``McpServerStatus(status="unavailable")`` of the catalogue (the workflow decides whether
that fails the Run), and a failing call a ``ToolOutcome(status="error")``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import mcp_types
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities._blobs import BlobStore, _dumps, blob_ref
from psych_runtime.activities._hooks import HookCall, Hooks, Interception
from psych_runtime.activities._mcp_catalog import (
    SEARCH_TOOL,
    CatalogCache,
    McpTool,
    NamedTool,
    StoredCatalog,
    definitions_chars,
    found_text,
    search,
    search_definition,
)
from psych_runtime.activities._mcp_names import allowed_tools, name_tools
from psych_runtime.activities._mcp_pool import (
    McpSessions,
    McpUnavailable,
    SessionBroke,
    SessionKey,
    describe_error,
    open_client,
)
from psych_runtime.activities._mcp_results import result_text
from psych_runtime.activities._mcp_settings import McpSettings
from psych_runtime.activities._outcomes import fixed_decision, store_outcome
from psych_runtime.activities._payloads import (
    MCP_LIST_TOOLS,
    MCP_SEARCH_TOOLS,
    TOOL_MCP,
    CatalogEntry,
    McpCatalog,
    McpCatalogInput,
    McpSearchInput,
    McpSearchResult,
    McpServerStatus,
    McpToolCall,
    PolicyDecision,
    ToolDefinition,
    ToolInfo,
    ToolOutcome,
)
from psych_runtime.activities._policy import Policy, RulePolicy
from psych_runtime.activities._redact import Redactor
from psych_runtime.activities._reporting import OUTAGE_MARGIN, complete_through_client
from psych_runtime.activities._secrets import SecretResolver
from psych_runtime.activities._spans import tool_span, traced_tool
from psych_runtime.specs import McpServer, NotFound, Scope, matches

_log = logging.getLogger(__name__)


class _Unavailable(Exception):
    """A server cannot be used for this Scope (the message names why, never a secret)."""


@dataclass(frozen=True)
class _Connection:
    key: SessionKey
    headers: dict[str, str]
    redact: Redactor


@dataclass(frozen=True)
class _Discovered:
    server: McpServer
    tools: tuple[McpTool, ...]
    """Narrowed by ``allow``, sorted by the server's name for them."""
    cached: bool
    listing: tuple[McpTool, ...]
    """The whole listing as the worker's cache holds it (the same object until it changes)."""


class McpActivities(ActivityClass):
    """The MCP activities, sharing one session pool, catalogue cache and BlobStore.

    Register them with a worker and close them when it stops::

        mcp = McpActivities(blobs=blobs, secrets=secrets)
        Worker(..., activities=mcp.activities())
        ...
        await mcp.aclose()
    """

    def __init__(
        self,
        *,
        blobs: BlobStore,
        secrets: SecretResolver | None = None,
        policy: Policy | None = None,
        settings: McpSettings | None = None,
        outage_seconds: float = 0.0,
        hooks: Hooks | None = None,
    ) -> None:
        """Create the activities.

        Args:
            blobs: where catalogues, results and tool messages are stored.
            secrets: resolves servers' credentials; without one, a server that names a
                credential is unavailable.
            policy: decides allow/deny/ask per tool (default ``RulePolicy()``: allow
                everything); an exception inside it counts as deny.
            settings: timeouts, cache, budget and pool bounds (default ``McpSettings()``).
            outage_seconds: as for ``ToolActivities``: calls not safe to repeat get a
                heartbeat timeout of this plus ``OUTAGE_MARGIN`` and report their outcome
                through the worker's client (0: no such care).
            hooks: the pre, post and on_error hooks every MCP tool call runs through
                (``activities/_hooks.py``; default none), matched on the model-facing
                ``server__tool`` name, so tools discovered mid-Run are covered too.
        """
        self.blobs = blobs
        self.hooks = hooks if hooks is not None else Hooks()
        self.secrets = secrets
        self.policy: Policy = policy if policy is not None else RulePolicy()
        self.settings = settings if settings is not None else McpSettings()
        self._outage_seconds = outage_seconds
        self.catalogs = CatalogCache(self.settings.catalog_ttl_seconds)
        self._built: OrderedDict[_MemoKey, tuple[tuple[tuple[McpTool, ...], ...], McpCatalog]] = (
            OrderedDict()
        )
        self.sessions = McpSessions(
            max_sessions=self.settings.max_sessions,
            idle_seconds=self.settings.idle_seconds,
            connect_timeout=self.settings.connect_timeout_seconds,
            on_tools_changed=self.catalogs.drop,
        )

    async def aclose(self) -> None:
        """Close every pooled MCP session."""
        await self.sessions.aclose()

    # --- activities ------------------------------------------------------------------------

    @activity.defn(name=MCP_LIST_TOOLS)
    async def list_tools(self, input: McpCatalogInput) -> McpCatalog:
        """This turn's catalogue (``resolve``); when its hash equals ``input.known_hash``
        only the hash and statuses come back."""
        catalog = await self.resolve(input)
        if catalog.catalog_hash == input.known_hash:
            return McpCatalog(catalog_hash=catalog.catalog_hash, servers=catalog.servers)
        return catalog

    async def resolve(self, input: McpCatalogInput) -> McpCatalog:
        """A turn's whole catalogue: each server discovered (or cached), narrowed and named.

        A server over the preload budget (or with ``preload: false``) is deferred: of its
        tools only those named in ``input.loaded`` are offered, plus ``search_mcp_tools``
        once per catalogue. An unreachable server is reported, not raised. The stored
        definitions are the base ones plus the offered MCP ones, sorted by name. Also
        what the model-call activity calls for an agent's turn (``McpTurn``).
        """
        outcomes = await asyncio.gather(
            *(self._discover(server, input.scope) for server in input.servers)
        )
        if not all(isinstance(found, _Discovered) for found in outcomes):
            return await self._build(input, outcomes)
        listings = tuple(found.listing for found in outcomes if isinstance(found, _Discovered))
        cached = tuple(found.cached for found in outcomes if isinstance(found, _Discovered))
        key = _memo_key(input)
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
            catalog_ref = await self.blobs.put(_dumps(stored.model_dump(mode="json")))
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
        data = _dumps([definition.model_dump(mode="json") for definition in definitions])
        tools_ref = blob_ref(data) if definitions else None
        catalog_hash = _catalog_hash(tools_ref, entries, statuses)
        if definitions:
            await self.blobs.put(data)
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

    @activity.defn(name=TOOL_MCP)
    async def call(self, input: McpToolCall) -> ToolOutcome:
        """One ``tools/call`` on the pooled session; failures are data.

        ``isError`` results, refused or unreachable servers, JSON-RPC errors and the call
        timeout are error outcomes. Progress notifications become heartbeats. Cancelling
        the activity (an abort) cancels the request, and the SDK sends the server
        ``notifications/cancelled``.

        Raises:
            asyncio.CancelledError: the activity was cancelled.
            CompleteAsyncError: a call not safe to repeat reports its outcome through the
                worker's client.
        """
        started = time.monotonic()
        span = tool_span(
            tool=f"{input.server.name}__{input.tool}",
            call_id=input.call_id,
            run_id=input.run_id,
            tenant=input.scope.tenant,
            arguments=input.arguments,
            tool_type="extension",
            extra={"psych.mcp.server": input.server.name, "psych.mcp.tool": input.tool},
        )
        plan = self.hooks.plan(
            HookCall(
                # The name the model and the records use, so a hook written for it matches.
                input.name or f"{input.server.name}__{input.tool}",
                "mcp",
                input.arguments,
                input.call_id,
                input.run_id,
                input.scope.tenant,
            )
        )
        outcome = await traced_tool(span, self._intercepted(input, started, plan))
        if not input.report_through_client or self._outage_seconds <= 0:
            return outcome
        complete_through_client(outcome, outcome.call_id)

    @activity.defn(name=MCP_SEARCH_TOOLS)
    async def search_tools(self, input: McpSearchInput) -> McpSearchResult:
        """The built-in ``search_mcp_tools``: search the deferred servers' stored catalogues.

        At most ``input.limit`` tools whose name or description holds the query's words
        (case-insensitive); the outcome lists each one's model-facing name, description
        and parameter schema, and ``found`` their names (offered from the next turn).
        """
        started = time.monotonic()
        # Hooks see the query only: the server the model named is already resolved into
        # ``input.servers`` by the workflow.
        plan = self.hooks.plan(
            HookCall(
                "search_mcp_tools",
                "builtin",
                {"query": input.query},
                input.call_id,
                input.run_id,
                input.scope.tenant,
            )
        )
        denied = await plan.before()
        if denied is None and plan.rewritten:
            query = plan.arguments.get("query")
            if set(plan.arguments) != {"query"} or not isinstance(query, str) or not query:
                denied = (
                    "A pre-call hook rewrote search_mcp_tools' arguments to "
                    f"{plan.arguments!r}: it may only set query (a non-empty string)."
                )
            else:
                input = input.model_copy(update={"query": query})
        if denied is not None:
            refusal = await store_outcome(
                self.blobs,
                input.call_id,
                "denied",
                denied,
                started=started,
                limit=input.large_result_bytes,
            )
            return McpSearchResult(outcome=plan.stamp(refusal))
        candidates: list[NamedTool] = []
        searched: list[str] = []
        missing: list[str] = []
        for server in input.servers:
            ref = input.catalogs.get(server.name)
            if ref is None:
                missing.append(server.name)
                continue
            try:
                stored = StoredCatalog.model_validate_json(await self.blobs.get(ref))
            except NotFound:
                missing.append(server.name)
                continue
            searched.append(server.name)
            candidates.extend(stored.tools)
        found = search(candidates, input.query, input.limit)
        text = found_text(found, input.query, searched)
        if missing:
            text += f"\n\n(The catalogues of {', '.join(missing)} are not available this turn.)"
        status, text = await plan.after("ok", text)
        outcome = await store_outcome(
            self.blobs, input.call_id, status, text, started=started, limit=input.large_result_bytes
        )
        return McpSearchResult(
            outcome=plan.stamp(outcome), found=tuple(named.name for named in found)
        )

    # --- discovery -------------------------------------------------------------------------

    async def _base_definitions(self, ref: str | None) -> list[ToolDefinition]:
        if ref is None:
            return []
        data = json.loads(await self.blobs.get(ref))
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

    async def _discover(self, server: McpServer, scope: Scope) -> _Discovered | str:
        """The server's narrowed tools, or why it is unavailable (redacted)."""
        redact = Redactor()
        try:
            connection = await self._connection(server, scope)
            redact = connection.redact
            tools, cached = await self._listing(server, connection)
        except Exception as err:
            reason = redact(_reason(err))
            _log.warning("MCP server %s is unavailable: %s", server.name, reason)
            return reason
        allowed = set(allowed_tools((tool.tool for tool in tools), server.allow))
        narrowed = tuple(tool for tool in tools if tool.tool in allowed)
        return _Discovered(server=server, tools=narrowed, cached=cached, listing=tools)

    async def _listing(
        self, server: McpServer, connection: _Connection
    ) -> tuple[tuple[McpTool, ...], bool]:
        cached = self.catalogs.get(connection.key)
        if cached is not None:
            return cached, True
        generation = self.catalogs.generation(connection.key)
        try:
            tools = await self._list_on_session(server, connection)
        except SessionBroke as err:
            if not err.reused:
                raise
            # A pooled session that broke since its last use (its server restarted, the
            # stream was cut) fails at once; listing is read-only, so it is asked again on
            # a fresh session. A tools/call never is: it may have reached the server.
            tools = await self._list_on_session(server, connection)
        self.catalogs.put(connection.key, tools, generation)
        return tools, False

    async def _list_on_session(
        self, server: McpServer, connection: _Connection
    ) -> tuple[McpTool, ...]:
        bound = self.settings.list_timeout_seconds
        async with self.sessions.client(connection.key, server.url, connection.headers) as client:
            try:
                async with asyncio.timeout(bound):
                    return await self._all_pages(client)
            except TimeoutError:
                raise _Unavailable(
                    f"tools/list gave no complete answer within {bound:g} s"
                ) from None

    async def _all_pages(self, client: Client) -> tuple[McpTool, ...]:
        tools: dict[str, McpTool] = {}
        cursor: str | None = None
        for _ in range(self.settings.max_list_pages):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            for tool in page.tools:
                tools.setdefault(tool.name, McpTool.of(tool))
            cursor = page.next_cursor
            if cursor is None:
                return tuple(tools[name] for name in sorted(tools))
        raise _Unavailable(f"tools/list did not end within {self.settings.max_list_pages} pages")

    async def _connection(self, server: McpServer, scope: Scope) -> _Connection:
        """The pool key, headers and redactor for ``server`` under ``scope``."""
        if server.oauth is not None:
            raise _Unavailable(f"{server.name}: OAuth is not supported by this worker")
        secret = await self._secret(server, scope)
        headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        redact = Redactor()
        if secret is not None and server.credential is not None:
            redact.add(server.credential, secret)
        key = SessionKey.of(scope, server.url, server.transport, secret)
        return _Connection(key=key, headers=headers, redact=redact)

    async def _secret(self, server: McpServer, scope: Scope) -> str | None:
        return await resolve_credential(server, scope, self.secrets)

    # --- calls -----------------------------------------------------------------------------

    async def _intercepted(
        self, input: McpToolCall, started: float, plan: Interception
    ) -> ToolOutcome:
        """The call between its pre hooks and its post or on_error hooks."""
        denied = await plan.before()
        if denied is not None:
            stored = await store_outcome(
                self.blobs,
                input.call_id,
                "denied",
                denied,
                started=started,
                limit=input.large_result_bytes,
            )
            return plan.stamp(stored)
        if plan.rewritten:
            input = input.model_copy(update={"arguments": plan.arguments})
        return await self._call(input, started, plan)

    async def _call(self, input: McpToolCall, started: float, plan: Interception) -> ToolOutcome:
        server = input.server
        redact = Redactor()

        async def outcome(status: Literal["ok", "error"], text: str) -> ToolOutcome:
            # Hooks see the result with the server's credential already redacted.
            final, shown = await plan.after(status, redact(text))
            stored = await store_outcome(
                self.blobs,
                input.call_id,
                final,
                shown,
                started=started,
                limit=input.large_result_bytes,
            )
            return plan.stamp(stored)

        if server.allow and not matches(input.tool, server.allow):
            return await outcome(
                "error", f"tool {input.tool!r} of MCP server {server.name!r} is not granted"
            )
        try:
            connection = await self._connection(server, input.scope)
        except _Unavailable as err:
            return await outcome("error", f"MCP server {server.name!r} is unavailable: {err}")
        redact = connection.redact
        reports: asyncio.Queue[str] = asyncio.Queue()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            # Runs in the session's owner task, outside the activity's context: the
            # activity's own task heartbeats for it.
            of = "" if total is None else f"/{total:g}"
            reports.put_nowait(f"{progress:g}{of} {message or ''}".strip())

        try:
            async with self.sessions.client(connection.key, server.url, connection.headers) as c:
                # The SDK makes the client span of the request itself ("MCP send
                # tools/call <tool>", under this call's execute_tool span).
                result = await self._heartbeating(
                    c.call_tool(input.tool, input.arguments, progress_callback=on_progress),
                    reports,
                )
        except TimeoutError:
            return await outcome(
                "error",
                f"{server.name}__{input.tool}: no result within "
                f"{self.settings.call_timeout_seconds:g} s (the call was cancelled)",
            )
        except (McpUnavailable, MCPError) as err:
            return await outcome(
                "error", f"MCP server {server.name!r}, tool {input.tool!r}: {_reason(err)}"
            )
        text = result_text(result)
        return await outcome("error" if result.is_error else "ok", text)

    async def _heartbeating(
        self,
        work: Coroutine[Any, Any, mcp_types.CallToolResult],
        progress: asyncio.Queue[str],
    ) -> mcp_types.CallToolResult:
        """Await ``work`` within the call timeout, heartbeating on an interval and on each
        progress notification. Cancellation (and the timeout) cancel it and wait for it,
        so the SDK has queued its cancellation notice before this returns (the pool sends
        it before closing the session: ``McpSessions._own``)."""
        task = asyncio.create_task(work)
        waiter: asyncio.Task[str] | None = None
        deadline = time.monotonic() + self.settings.call_timeout_seconds
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if waiter is None:
                    waiter = asyncio.create_task(progress.get())
                done, _ = await asyncio.wait(
                    {task, waiter},
                    timeout=min(self.settings.heartbeat_seconds, left),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if task in done:
                    return task.result()
                if waiter in done:
                    activity.heartbeat(waiter.result())
                    waiter = None
                else:
                    activity.heartbeat()
        except BaseException:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved, so asyncio does not log it as never retrieved
            raise
        finally:
            if waiter is not None:
                waiter.cancel()


async def resolve_credential(
    server: McpServer, scope: Scope, secrets: SecretResolver | None
) -> str | None:
    """The secret ``server.credential`` names for ``scope`` (None when it names none).

    Raises:
        _Unavailable: there is no resolver or no such secret (the message names the
            credential, never a value).
    """
    if server.credential is None:
        return None
    if secrets is None:
        raise _Unavailable(
            f"credential {server.credential!r} cannot be resolved: this worker has no "
            "SecretResolver"
        )
    try:
        return await secrets.resolve(scope, server.credential)
    except NotFound as err:
        raise _Unavailable(f"credential {server.credential!r} is not available") from err


def _reason(err: BaseException) -> str:
    if isinstance(err, _Unavailable | McpUnavailable):
        return str(err)
    return describe_error(err)


_BUILT_MAX = 256
"""Turn catalogues a worker keeps built (least recently used dropped first)."""

_MemoKey = tuple[str, str | None, str | None, tuple[str, ...], tuple[str, ...]]


def _memo_key(input: McpCatalogInput) -> _MemoKey:
    """What a built catalogue depends on besides the listings: whose (the blobs it stored
    are sealed per tenant), the base tools, the found names and the servers as declared."""
    return (
        input.scope.tenant,
        input.scope.principal,
        input.base_tools_ref,
        input.loaded,
        tuple(server.model_dump_json() for server in input.servers),
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


async def check_servers(
    servers: Sequence[McpServer],
    scope: Scope,
    secrets: SecretResolver | None,
    settings: McpSettings | None = None,
) -> dict[str, str | None]:
    """Connect to each server (``initialize`` and one ``tools/list``), as publish-time
    ``--check-connections`` does; server name -> why it failed, or None when it answered.

    Each server gets a fresh connection, closed before returning (nothing is pooled), and
    the servers are tried concurrently, each bounded by the connect and list timeouts.
    Messages name credentials, never their values.
    """
    chosen = settings if settings is not None else McpSettings()

    async def check(server: McpServer) -> str | None:
        redact = Redactor()
        try:
            if server.oauth is not None:
                raise _Unavailable("OAuth is not supported by this worker")
            secret = await resolve_credential(server, scope, secrets)
            if secret is not None and server.credential is not None:
                redact.add(server.credential, secret)
            headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
            bound = chosen.connect_timeout_seconds + chosen.list_timeout_seconds
            async with asyncio.timeout(bound):
                async with open_client(
                    server.url,
                    server.transport,
                    headers,
                    connect_timeout=chosen.connect_timeout_seconds,
                ) as client:
                    await client.list_tools(cache_mode="bypass")
        except Exception as err:
            return redact(_reason(err))
        return None

    answers = await asyncio.gather(*(check(server) for server in servers))
    return {server.name: answer for server, answer in zip(servers, answers, strict=True)}
