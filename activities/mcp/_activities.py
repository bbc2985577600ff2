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
import logging
import time
from collections import OrderedDict
from typing import Literal, TypeVar

import mcp_types
from mcp.shared.exceptions import MCPError
from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities._beat import heartbeating
from psych_runtime.activities.blobs import BlobStore
from psych_runtime.activities.contract import (
    MCP_AUTHORIZE,
    MCP_LIST_TOOLS,
    MCP_SEARCH_TOOLS,
    TOOL_MCP,
    McpAuthorized,
    McpAuthorizeInput,
    McpCatalog,
    McpCatalogInput,
    McpInputRequired,
    McpSearchInput,
    McpSearchResult,
    McpToolCall,
    ToolOutcome,
)
from psych_runtime.activities.egress import Attempt, Egress, attempts
from psych_runtime.activities.hooks import HookCall, Hooks, Interception
from psych_runtime.activities.mcp._call import Round, call_round
from psych_runtime.activities.mcp._catalog import (
    CatalogCache,
    NamedTool,
    StoredCatalog,
    found_text,
    search,
)
from psych_runtime.activities.mcp._connect import Unavailable, failure_reason, never_called
from psych_runtime.activities.mcp._consent import (
    ConsentInterrupted,
    asking,
    consent_needed,
    exchange,
)
from psych_runtime.activities.mcp._consent_error import McpConsentRequired, consent_error
from psych_runtime.activities.mcp._discovery import Catalogues
from psych_runtime.activities.mcp._input import (
    BadAnswer,
    Unanswerable,
    heartbeating_round,
    input_required,
)
from psych_runtime.activities.mcp._oauth import OAuthClients
from psych_runtime.activities.mcp._pool import McpSessions, McpUnavailable, SessionBroke
from psych_runtime.activities.mcp._results import result_text
from psych_runtime.activities.mcp._settings import McpSettings
from psych_runtime.activities.secrets import Redactor, SecretResolver
from psych_runtime.activities.telemetry import tool_span, traced_tool
from psych_runtime.activities.tokens import TokenStore
from psych_runtime.activities.tools import (
    Policy,
    RulePolicy,
    complete_through_client,
    store_outcome,
    unexpected,
)
from psych_runtime.specs import NotFound, StoreUnavailable, TenantPermits, matches

_log = logging.getLogger(__name__)
_R = TypeVar("_R")


class McpActivities(Catalogues, ActivityClass):
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
        egress: Egress | None = None,
        tokens: TokenStore | None = None,
        permits: TenantPermits | None = None,
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
                (``activities/hooks/_hooks.py``; default none), matched on the model-facing
                ``server__tool`` name, so tools discovered mid-Run are covered too.
            egress: the worker's egress port, through which every session connects for
                its tenant (default: one from the environment, ``EgressSettings.from_env``).
            tokens: where OAuth tokens are kept, shared by the fleet (``TokenStore``);
                without one, a server behind OAuth is unavailable.
            permits: what each tenant may use (``TenantPermits``): a server's tools are
                narrowed by it before ``allow``, and a call outside it is refused (default
                none: no restriction).
        """
        self.blobs = blobs
        self.hooks = hooks if hooks is not None else Hooks()
        self.secrets = secrets
        self.policy: Policy = policy if policy is not None else RulePolicy()
        self.settings = settings if settings is not None else McpSettings()
        self.permits = permits
        self.egress = egress if egress is not None else Egress()
        issuers = self.settings.oauth_issuers
        self.oauth = None if tokens is None else OAuthClients(issuers, tokens, egress=self.egress)
        self._outage_seconds = outage_seconds
        self.catalogs = CatalogCache(
            self.settings.catalog_ttl_seconds, self.settings.catalog_max_ttl_seconds
        )
        self._built = OrderedDict()
        self.sessions = McpSessions(
            max_sessions=self.settings.max_sessions,
            idle_seconds=self.settings.idle_seconds,
            connect_timeout=self.settings.connect_timeout_seconds,
            on_tools_changed=self.catalogs.drop,
            egress=self.egress,
            on_closed=self.catalogs.drop,
        )

    async def aclose(self) -> None:
        """Close every pooled MCP session."""
        await self.sessions.aclose()

    # --- activities ------------------------------------------------------------------------

    @activity.defn(name=MCP_LIST_TOOLS)
    async def list_tools(self, input: McpCatalogInput) -> McpCatalog:
        """This turn's catalogue (``resolve``); when its hash equals ``input.known_hash``
        only the hash and statuses come back."""
        try:
            catalog = await self.resolve(input)
        except McpConsentRequired as err:
            raise consent_error(err) from None
        if catalog.catalog_hash == input.known_hash:
            return McpCatalog(catalog_hash=catalog.catalog_hash, servers=catalog.servers)
        return catalog

    @activity.defn(name=MCP_AUTHORIZE)
    async def authorize(self, input: McpAuthorizeInput) -> McpAuthorized:
        """Exchange the authorization code a person's consent brought (``_consent``):
        the token is stored under the Run's Scope, or the answer says why not."""
        oauth = self.oauth
        store = None if oauth is None else oauth.store
        if oauth is None or store is None:
            return McpAuthorized(ok=False, reason="this worker keeps no OAuth tokens")
        scope = input.scope
        async with self.egress.mcp_client(scope.tenant) as http:
            reason = await exchange(
                store,
                scope.tenant,
                scope.principal,
                input.id,
                http.send,
                lambda key, client, metadata: oauth.tokens(key, client, metadata),
            )
        if reason is not None:
            activity.logger.warning("authorization %s not exchanged: %s", input.id, reason)
        return McpAuthorized(ok=reason is None, reason=reason)

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
            HookCall.of(
                # The name the model and the records use, so a hook written for it matches.
                input.name or f"{input.server.name}__{input.tool}",
                "mcp",
                input.arguments,
                input.call_id,
                input.run_id,
                input.scope,
            )
        )
        try:
            outcome = await traced_tool(span, self._intercepted(input, started, plan))
        except McpConsentRequired as err:
            raise consent_error(err) from None
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
            HookCall.of(
                "search_mcp_tools",
                "builtin",
                {"query": input.query},
                input.call_id,
                input.run_id,
                input.scope,
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

    # --- calls -----------------------------------------------------------------------------

    async def _intercepted(
        self, input: McpToolCall, started: float, plan: Interception
    ) -> ToolOutcome:
        """The call between its pre hooks and its post or on_error hooks; a tool outside
        the server's ``allow``, or outside what the tenant is permitted, is refused before
        any hook (the security check comes first: no on_error hook may turn it into a
        result)."""
        # Under a beat: a slow permits port is not a call lost (``_denied``).
        denied = await heartbeating(self._denied(input, plan), self.settings.heartbeat_seconds)
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
        with asking():  # a consent this call's requests need is its own, none other's
            return await self._call(input, started, plan)

    async def _denied(self, input: McpToolCall, plan: Interception) -> str | None:
        """Why the call is not sent: refused by ``allow`` or the tenant's permits, or by a
        pre hook (None: it is sent). The port may take longer than the heartbeat timeout."""
        server = input.server
        permitted = await self.permitted(input.scope.tenant, server)
        if server.allow and not matches(input.tool, server.allow):
            return f"tool {input.tool!r} of MCP server {server.name!r} is not granted"
        if permitted is not None and not matches(input.tool, permitted):
            return (
                f"tool {input.tool!r} of MCP server {server.name!r} is not permitted to "
                f"tenant {input.scope.tenant!r}"
            )
        return await plan.before()

    async def _call(self, input: McpToolCall, started: float, plan: Interception) -> ToolOutcome:
        server = input.server
        redact = Redactor()

        async def outcome(
            status: Literal["ok", "error"], text: str, sent: bool = True
        ) -> ToolOutcome:
            # Hooks see the result with the server's credential already redacted.
            final, shown = await plan.after(status, redact(text))
            stored = await store_outcome(
                self.blobs,
                input.call_id,
                final,
                shown,
                started=started,
                limit=input.large_result_bytes,
                once=sent and input.report_through_client,  # set for a tool not safe to repeat
                unsent=not sent,
            )
            return plan.stamp(stored)

        try:
            connection = await self._connection(server, input.scope)
        except Unavailable as err:
            said = f"MCP server {server.name!r} is unavailable: {err}"
            return await outcome("error", said, sent=False)
        except Exception as err:  # a SecretResolver's or an OAuth store's own failure
            said = unexpected(f"{server.name}__{input.tool}", err, redact)
            return await outcome("error", said, sent=False)
        redact = connection.redact
        reports: asyncio.Queue[str] = asyncio.Queue()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            # Runs in the session's owner task, outside the activity's context: the
            # activity's own task heartbeats for it.
            of = "" if total is None else f"/{total:g}"
            # The server's words go to Temporal as heartbeat details: redacted, as results.
            reports.put_nowait(redact(f"{progress:g}{of} {message or ''}".strip()))

        leased = False  # connecting failed before: the call was never sent
        tried: list[Attempt] = []  # after: what became of its tools/call requests
        made = Round()  # not sent: only the tool's listing was, which runs no tool
        try:
            with attempts(tried):
                async with self.sessions.client(
                    connection.key, server.url, connection.headers, connection.auth
                ) as c:
                    leased = True
                    # The SDK makes the client span of the request itself ("MCP send
                    # tools/call <tool>", under this call's execute_tool span).
                    consents = None if self.oauth is None else self.oauth.consents
                    called = call_round(
                        c, input.tool, input.arguments, on_progress, input.input, made
                    )
                    if consents is not None:
                        called = consents.unless_needed(called)
                    result = await heartbeating_round(
                        called,
                        reports,
                        within=self.settings.call_timeout_seconds,
                        beat_every=self.settings.heartbeat_seconds,
                    )
        except BadAnswer as err:
            said = f"MCP server {server.name!r}, tool {input.tool!r}: not sent, {err}"
            return await outcome("error", said, sent=False)
        except TimeoutError:
            within = f"{self.settings.call_timeout_seconds:g} s"
            said = (
                f"no result within {within} (the call was cancelled)"
                if made.sent
                else f"not sent within {within}: its tool was still being listed (the tool "
                "did not run)"
            )
            return await outcome("error", f"{server.name}__{input.tool}: {said}", sent=made.sent)
        except (McpUnavailable, MCPError, ConsentInterrupted) as err:
            consents = None if self.oauth is None else self.oauth.consents
            needed = await consent_needed(consents, connection.consent, server.name)
            if needed is not None:
                self.sessions.retire(connection.key, "a person's consent is needed")
                # Never reached the tool (a 401): run again once the person consented.
                raise needed from None
            why = made.failure(failure_reason(err))
            said = f"MCP server {server.name!r}, tool {input.tool!r}: {why}"
            # Leased, its tools/call may still have never left: not yet sent (the listing
            # before it failed), its connection refused, or the SDK refused it unsent on a
            # session that had ended (nothing handed over).
            unsent = (
                not made.sent
                or never_called(tried, input.tool)
                or (isinstance(err, SessionBroke) and err.nothing_handed)
            )
            return await outcome("error", said, sent=leased and not unsent)
        except (McpConsentRequired, StoreUnavailable):  # a token store down: nothing sent
            raise
        except Exception as err:
            said = unexpected(f"{server.name}__{input.tool}", err, redact)
            return await outcome("error", said, sent=made.sent)
        finally:
            # Read: let the bodies (the arguments) go. Tasks started in this context keep
            # the list as long as they run (the SDK's writer keeps the last sender's).
            tried.clear()
        if isinstance(result, mcp_types.InputRequiredResult):
            try:
                asked = input_required(result)
            except Unanswerable as err:
                return await outcome(
                    "error", f"MCP server {server.name!r}, tool {input.tool!r}: {err}"
                )
            return await self._asking(input, asked, started, plan, redact)
        text = result_text(result)
        return await outcome("error" if result.is_error else "ok", text)

    async def _asking(
        self,
        input: McpToolCall,
        asked: McpInputRequired,
        started: float,
        plan: Interception,
        redact: Redactor,
    ) -> ToolOutcome:
        """An ``input_required`` round's outcome: not a result (post hooks wait for the
        final one); its text is what the server asks, for the records."""
        questions = [redact(question.text) for question in asked.questions]
        text = "\n\n".join(questions) or "the server asks for input no person answers"
        stored = await store_outcome(
            self.blobs,
            input.call_id,
            "ok",
            f"[input required] {text}",
            started=started,
            limit=input.large_result_bytes,
        )
        shown = asked.model_copy(
            update={
                "questions": tuple(
                    q.model_copy(update={"text": t})
                    for q, t in zip(asked.questions, questions, strict=True)
                )
            }
        )
        return plan.stamp(
            stored.model_copy(update={"status": "input_required", "input_required": shown})
        )
