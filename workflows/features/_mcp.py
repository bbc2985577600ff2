"""MCP servers at turn boundaries: what a turn offers, fixed within the turn.

An agent's turn resolves its MCP catalogue inside its model call (``McpTurn`` in the
input, ``McpTurnResult`` in the result: the hash, the statuses when they changed, and the
entries of the MCP tools the model called), so a turn's discovery adds no event to
history. A workflow's tool step has no model call: it asks ``psych.mcp.list_tools`` (a
local activity, one marker in history) before the step. Either way the worker discovers or
reads its cache, narrows and names the tools; replay reads history and never talks to a
server.

A non-optional server that is unreachable fails the Run naming it; an optional one is left
out and the model is told when it goes away and when it comes back. A server whose consent
a person refused (``kernel/_consent.py``) is left out for the rest of the Run, its tools
not offered (the model told when a turn's discovery met the refusal: ``kernel/_turns.py``),
and a call of one is told why. Deferred servers (a
catalogue over the worker's preload budget, or ``preload: false``) offer only the tools
``search_mcp_tools`` found, from the turn after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        CatalogEntry,
        ChatMessage,
        McpCatalog,
        McpCatalogInput,
        McpConsent,
        McpSearchInput,
        McpServerStatus,
        McpTurn,
        McpTurnResult,
        ModelCallInput,
        ToolCallRequest,
        ToolCatalog,
    )
    from psych_runtime.specs import (
        MCP_TOOL_SEPARATOR,
        McpServer,
        Scope,
        ToolStep,
        WorkflowSpec,
        sanitise_tool_name,
    )
    from psych_runtime.workflows.contract._records import McpDiscovered, RunStatus
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._consent import consent_of
    from psych_runtime.workflows.kernel._feature import Builtin, CallDone, Feature, RunView
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._record_log import RecordLog
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_result import ToolResult, from_outcome, inline

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


class McpCarry(BaseModel):
    """What the Run knows of its MCP servers (``_mcp.McpState`` without the servers, which
    come from the Spec again): its carry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    catalog_hash: str | None = None
    tools_ref: str | None = None
    entries: dict[str, CatalogEntry] = Field(default_factory=dict)
    loaded: tuple[str, ...] = ()
    unavailable: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()
    catalogs: dict[str, str] = Field(default_factory=dict)
    statuses: tuple[McpServerStatus, ...] = ()


def turn_input(state: McpState, refused: Mapping[str, str]) -> McpTurn | None:
    """What an agent's model call needs to resolve this turn's MCP tools (None: no servers),
    without the servers whose consent a person ``refused`` in this Run."""
    servers = tuple(server for name, server in state.servers.items() if name not in refused)
    if not servers:
        return None
    return McpTurn(
        servers=servers,
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
    consent: Callable[[McpConsent, str], Awaitable[str | None]] | None = None,
    refused: Mapping[str, str] | None = None,
) -> Turn:
    """Resolve a workflow step's catalogue (the base one alone when the Run has no servers,
    or none but those whose consent a person ``refused``: the Run's own, as ``consent``
    adds to it).

    A server that needs a person's consent suspends the Run through ``consent`` (then
    discovery is asked again; a refused consent fails the Run naming it, unless the server
    is optional: then it is left out, as an agent's turn leaves it out); without it, that
    fails the Run like an unreachable server. A discovery that timed out on its last
    attempt fails it too, whether it arrives as the ``ActivityError`` it is live or as the
    bare ``TimeoutError`` its marker replays as.

    Raises:
        Stop: FAILED when a non-optional server is unreachable, refused, or discovery
            itself failed.
    """
    offered = {entry.name: entry for entry in base.entries}
    while True:
        servers = tuple(s for name, s in state.servers.items() if name not in (refused or {}))
        if not servers:
            return Turn(base.tools_ref, offered, [])
        try:
            result = await calls.list_mcp_tools(
                McpCatalogInput(
                    run_id=run_id,
                    turn=turn,
                    servers=servers,
                    scope=scope,
                    base_tools_ref=base.tools_ref,
                    loaded=tuple(state.loaded),
                    known_hash=state.catalog_hash,
                )
            )
            break
        except (ActivityError, ApplicationError, TemporalTimeoutError) as err:
            # A last attempt that timed out is an ActivityError live and its bare
            # TimeoutError where its marker replays; live the Run settled FAILED on the
            # ActivityError, psych-a2a-cards-failure-settles asked or not, so the bare one
            # settles every Run the same (history
            # workflow_mcp_discovery_timed_out_before_patch).
            needed = None if isinstance(err, TemporalTimeoutError) else consent_of(err)
            if needed is None or consent is None:
                raise Stop(RunStatus.FAILED, f"MCP discovery failed: {cause_text(err)}") from err
            why = await consent(needed, f"step-{turn}")
            if why is not None and not state.servers[needed.server].optional:
                raise Stop(RunStatus.FAILED, f"MCP discovery failed: {why}") from err
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
            unmatched=status.unmatched,
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


class Mcp(Feature):
    """MCP servers at turn boundaries, and ``search_mcp_tools`` for deferred servers."""

    name = "mcp"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.state = McpState()

    def builtins(self) -> tuple[Builtin, ...]:
        # Offered by the MCP activities (with its definition) only while a server is
        # deferred, so it has no offer of its own.
        return (Builtin(SEARCH_TOOL, lambda: None, self._search, executes=True),)

    def admit(self) -> None:
        spec = self.run.spec
        self.state.servers = {server.name: server for server in spec.mcp_servers}
        if isinstance(spec, WorkflowSpec):
            # A deferred server (preload false, or a catalogue over the preload budget)
            # offers only the tools a search found, and a workflow never searches: its
            # steps name their tools, so those are loaded from the start.
            self.state.loaded = [s.tool for s in spec.steps if isinstance(s, ToolStep)]

    def into_call(self, call: ModelCallInput) -> ModelCallInput:
        # Resolved at every turn boundary, inside the model call, fixed within the turn.
        mcp = turn_input(self.state, self.run.suspensions.consents_refused)
        return call if mcp is None else call.model_copy(update={"mcp": mcp})

    def after_call(self, done: CallDone) -> None:
        if done.result.mcp is not None:
            take_turn(self.state, done.result.mcp, turn=done.turn, log=self.run.log)

    def offered(self) -> Mapping[str, CatalogEntry]:
        refused = self.run.suspensions.consents_refused
        if not refused:
            return self.state.entries
        return {n: e for n, e in self.state.entries.items() if e.server not in refused}

    def not_offered(self, tool: str) -> str | None:
        refused = self.run.suspensions.consents_refused
        for server in sorted(refused):
            if tool.startswith(sanitise_tool_name(server) + MCP_TOOL_SEPARATOR):
                return f"MCP server {server!r} is not available: {refused[server]}"
        for server in sorted(self.state.unavailable):
            if tool.startswith(sanitise_tool_name(server) + MCP_TOOL_SEPARATOR):
                return (
                    f"MCP server {server!r} is unavailable, and optional: the Run went on "
                    "without its tools"
                )
        return None

    async def before_step(self, turn: int, base: ToolCatalog) -> None:
        run = self.run
        await refresh(
            self.state,
            base,
            run_id=run.input.run_id,
            turn=turn,
            scope=run.input.scope,
            log=run.log,
            consent=run.await_consent,
            refused=run.suspensions.consents_refused,
        )

    def carry(self) -> Any:
        state = self.state
        if not state.servers:
            return None
        return McpCarry(
            catalog_hash=state.catalog_hash,
            tools_ref=state.tools_ref,
            entries=dict(state.entries),
            loaded=tuple(state.loaded),
            # Sorted: set order is not deterministic across processes.
            unavailable=tuple(sorted(state.unavailable)),
            deferred=state.deferred,
            catalogs=dict(state.catalogs),
            statuses=state.statuses,
        )

    def restore(self, carried: Any) -> None:
        mcp = McpCarry.model_validate(carried)
        state = self.state
        state.catalog_hash = mcp.catalog_hash
        state.tools_ref = mcp.tools_ref
        state.entries = dict(mcp.entries)
        state.loaded = list(mcp.loaded)
        state.unavailable = set(mcp.unavailable)
        state.deferred = mcp.deferred
        state.catalogs = dict(mcp.catalogs)
        state.statuses = mcp.statuses

    async def _search(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        """Search the deferred servers' catalogues; what it finds is offered next turn."""
        mcp, run = self.state, self.run
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return inline(call, "error", "search_mcp_tools needs a query (words to look for)")
        server = arguments.get("server")
        if server is not None and server not in mcp.deferred:
            known = ", ".join(mcp.deferred) or "none"
            return inline(
                call, "error", f"{server!r} is not a server to search; deferred servers: {known}"
            )
        names = [server] if server is not None else list(mcp.deferred)
        if not names:
            return inline(call, "error", "no MCP server is deferred this turn; nothing to search")
        result = await calls.search_mcp_tools(
            McpSearchInput(
                run_id=run.input.run_id,
                call_id=call.id,
                servers=tuple(mcp.servers[name] for name in names),
                catalogs={name: mcp.catalogs[name] for name in names if name in mcp.catalogs},
                query=query,
                large_result_bytes=run.limits.large_result_bytes,
                scope=run.input.scope,
            ),
            summary=f"tool {call.name}, turn {turn}",
        )
        mcp.loaded.extend(name for name in result.found if name not in mcp.loaded)
        return from_outcome(call, result.outcome)
