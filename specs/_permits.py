"""What a tenant is permitted: the ``TenantPermits`` port an operator answers through, its
static implementation (``StaticPermits``, what a worker settings file's ``permits:``
section builds), and ``permit_problems``, the check a client makes before it starts a Run.

Access narrows in one chain (SEMANTICS.md, "Access narrowing"): what a source offers ⊇ what
the tenant permits ⊇ what the Spec grants (``allow``) ⊇ what is callable now. The middle
link comes from here and is handed to ``narrow`` as ``permitted``, in ``allow``'s pattern
syntax (exact names, or a prefix ending in ``*``), three-state: None permits all, ``()``
nothing.

A source is the worker's code tools, HTTP tools, an MCP server or an A2A peer. Servers and
peers are told apart by URL: a Spec's name for one is its author's choice (a tenant could
give another server's name to its own), so ``StaticPermits`` never decides by the name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

from psych_runtime.specs._allow import allow_problems, matches
from psych_runtime.specs._errors import SpecError
from psych_runtime.specs._models import A2APeer, AgentSpec, CodeTool, McpServer, WorkflowSpec
from psych_runtime.specs._nested import nested_specs
from psych_runtime.specs._problem import Problem

PERMITS_ANSWER_SECONDS = 20.0
"""How long ``permitted_by`` waits for a port's answer; none by then fails as a raise does."""

PermitKind = Literal["code", "http", "mcp", "a2a"]
"""The kinds of source a tenant is permitted tools of."""


@dataclass(frozen=True)
class PermitSource:
    """Where tools come from, as the permits port is asked about it.

    Attributes:
        kind: ``code`` (the worker's ToolRegistry), ``http`` (HTTP tools a Spec declares),
            ``mcp`` (an MCP server) or ``a2a`` (an A2A peer).
        url: the server's or peer's URL as the Spec declares it (None for code and HTTP
            tools).
        name: the Spec's name for the server or peer, for messages (chosen by the Spec's
            author, so it must not decide what is permitted).
    """

    kind: PermitKind
    url: str | None = None
    name: str | None = None

    @classmethod
    def of_server(cls, server: McpServer) -> PermitSource:
        """The source an MCP server of a Spec is."""
        return cls("mcp", server.url, server.name)

    @classmethod
    def of_peer(cls, peer: A2APeer) -> PermitSource:
        """The source an A2A peer of a Spec is."""
        return cls("a2a", peer.url, peer.name)


class TenantPermits(Protocol):
    """The port through which an operator says what each tenant may use.

    Asked by a worker's tool, MCP and A2A activities when they build a Run's or a turn's
    catalogue (so the model is never offered what the tenant may not use) and before each
    call, and by
    ``PsychClient.dispatch`` before a Run starts, each through ``permitted_by``. An
    exception it raises, or an answer of another shape, fails what asked.
    """

    async def permitted(self, tenant: str, source: PermitSource) -> Sequence[str] | None:
        """The names of ``source``'s tools ``tenant`` may use, as patterns (exact, or a
        prefix ending in ``*``); None: no restriction; empty: none of them."""
        ...


@dataclass(frozen=True)
class Permits:
    """What one tenant is permitted; each field three-state: None permits all of that
    kind, an empty one nothing.

    Attributes:
        code_tools: patterns of the worker's code tools it may use.
        http_tools: patterns of the HTTP tools its Specs may declare.
        mcp_servers: URL -> patterns of that server's own tool names; a server whose URL
            is not listed is permitted nothing (URLs match exactly, as the Spec writes
            them: another spelling of a listed URL is not listed).
        a2a_peers: URL -> patterns of that peer's skill ids, as ``mcp_servers``.

    Raises:
        SpecError: a pattern no name can match (an empty one, or ``*`` before its end), or
            one string given for a list of patterns, named with its field.
    """

    code_tools: tuple[str, ...] | None = None
    http_tools: tuple[str, ...] | None = None
    mcp_servers: Mapping[str, tuple[str, ...]] | None = None
    a2a_peers: Mapping[str, tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        # Held as tuples and read-only mappings, whatever sequences were given: a table
        # handed to a worker must not change under it.
        problems = []
        for label in ("code_tools", "http_tools"):
            patterns: Sequence[str] | None = getattr(self, label)
            if patterns is not None:
                problems.extend(allow_problems(patterns, label))
                object.__setattr__(self, label, tuple(patterns))
        for label in ("mcp_servers", "a2a_peers"):
            table: Mapping[str, Sequence[str]] | None = getattr(self, label)
            if table is None:
                continue
            for url, listed in table.items():
                problems.extend(allow_problems(listed, f"{label}[{url!r}]"))
            frozen = {url: tuple(listed) for url, listed in table.items()}
            object.__setattr__(self, label, MappingProxyType(frozen))
        if problems:
            raise SpecError("\n".join(map(str, problems)))

    def of(self, source: PermitSource) -> tuple[str, ...] | None:
        """What ``source`` may be used for (see the class docstring)."""
        match source.kind:
            case "code":
                return self.code_tools
            case "http":
                return self.http_tools
            case "mcp":
                return _by_url(self.mcp_servers, source.url)
            case "a2a":
                return _by_url(self.a2a_peers, source.url)


def _by_url(table: Mapping[str, tuple[str, ...]] | None, url: str | None) -> tuple[str, ...] | None:
    if table is None:
        return None
    return table.get(url or "", ())


@dataclass(frozen=True)
class StaticPermits:
    """A ``TenantPermits`` answering from a fixed table.

    Attributes:
        tenants: tenant -> what it is permitted.
        default: what every tenant not in ``tenants`` is permitted (None: no restriction).
    """

    tenants: Mapping[str, Permits] = field(default_factory=dict)
    default: Permits | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenants", MappingProxyType(dict(self.tenants)))

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        """What ``tenant``'s entry (else ``default``) permits of ``source``."""
        permits = self.tenants.get(tenant, self.default)
        return None if permits is None else permits.of(source)


@dataclass(frozen=True)
class AllPermits:
    """A ``TenantPermits`` permitting only what every one of ``ports`` permits (a worker's
    code-given port and its settings file's section, when both are set), asking them at
    once, each bounded and named by ``permitted_by``."""

    ports: tuple[TenantPermits, ...]

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        """The patterns all ``ports`` permit (None: none of them restricts)."""
        return await self.permitted_within(tenant, source, None)

    async def permitted_within(
        self, tenant: str, source: PermitSource, within: float | None
    ) -> tuple[str, ...] | None:
        """``permitted``, each port asked at once through ``permitted_by`` with ``within``:
        one that does not answer in time is named (not the pair), and the first failure is
        raised as it is, the other questions cancelled."""
        import asyncio  # here: reading Specs (psych validate) needs no asyncio

        asked = [
            asyncio.ensure_future(permitted_by(port, tenant, source, within=within))
            for port in self.ports
        ]
        try:
            answers = await asyncio.gather(*asked)
        except BaseException:
            for question in asked:
                question.cancel()
            await asyncio.gather(*asked, return_exceptions=True)
            raise
        result: tuple[str, ...] | None = None
        for answer in answers:
            result = _both(result, answer)
        return result


async def permitted_by(
    permits: TenantPermits | None,
    tenant: str,
    source: PermitSource,
    *,
    within: float | None = None,
) -> tuple[str, ...] | None:
    """What ``permits`` answers for ``tenant`` and ``source``, checked: None (no port: no
    restriction), or the names and patterns as a tuple. Every caller asks through this, so
    a port's malformed answer permits nothing rather than everything, and a port that does
    not answer holds nothing up past ``within`` seconds (None: ``PERMITS_ANSWER_SECONDS``).

    Raises:
        TypeError: the answer is a string (its characters would each be a pattern, a ``*``
            among them permitting every name) or not a sequence of strings; named with the
            tenant and the source.
        TimeoutError: no answer within ``within`` seconds, named with the port, the tenant
            and the source. Whatever the port raises is raised as it is.
    """
    if permits is None:
        return None
    if isinstance(permits, AllPermits):
        # Its ports are each asked through here, so each is bounded; a bound of the pair's
        # own would expire first and name the pair, not the port that did not answer.
        return await permits.permitted_within(tenant, source, within)
    import asyncio  # here: reading Specs (psych validate) needs no asyncio

    where = source.kind if source.url is None else f"{source.kind} {source.url}"
    seconds = PERMITS_ANSWER_SECONDS if within is None else within
    bound = asyncio.timeout(seconds)
    try:
        async with bound:
            answer: object = await permits.permitted(tenant, source)
    except TimeoutError:
        if not bound.expired():
            raise  # the port's own
        raise TimeoutError(
            f"{type(permits).__name__}.permitted gave no answer within {seconds:g} s for "
            f"tenant {tenant!r} ({where})"
        ) from None
    if answer is None:
        return None
    if not isinstance(answer, str | bytes) and isinstance(answer, Iterable):
        patterns = tuple(answer)
        if all(isinstance(pattern, str) for pattern in patterns):
            return patterns
    raise TypeError(
        f"{type(permits).__name__}.permitted answered {answer!r} for tenant {tenant!r} "
        f"({where}): it must answer None or a sequence of names and patterns"
    )


def port_failure(tenant: str, err: BaseException) -> str:
    """What a server's or peer's status says when what ``tenant`` is permitted of it could
    not be asked (``err``: what ``permitted_by`` raised): it is then unavailable, as one
    that does not answer is."""
    return f"the tenant permits for {tenant!r} could not be asked: {type(err).__name__}: {err}"


def _both(first: Sequence[str] | None, second: Sequence[str] | None) -> tuple[str, ...] | None:
    """The patterns matching exactly the names both ``first`` and ``second`` match."""
    if first is None:
        return None if second is None else tuple(second)
    if second is None:
        return tuple(first)
    met = {meet for a in first for b in second if (meet := _meet(a, b)) is not None}
    return tuple(sorted(met))


def _meet(a: str, b: str) -> str | None:
    """The pattern matching what both ``a`` and ``b`` match, or None when no name does."""
    if a.endswith("*") and b.endswith("*"):
        return a if a[:-1].startswith(b[:-1]) else b if b[:-1].startswith(a[:-1]) else None
    if a.endswith("*"):
        return b if matches(b, (a,)) else None
    if b.endswith("*"):
        return a if matches(a, (b,)) else None
    return a if a == b else None


async def permit_problems(
    spec: AgentSpec | WorkflowSpec, tenant: str, permits: TenantPermits
) -> list[Problem]:
    """What ``spec`` (at any depth) uses that ``tenant`` is not permitted: a code or HTTP
    tool; an MCP server or A2A peer permitted nothing; an ``allow`` entry that can grant
    only what is not permitted. A server permitted some tools is not a problem: its
    discovery offers only those. Sorted by path.
    """
    asked: dict[PermitSource, tuple[str, ...] | None] = {}

    async def ask(source: PermitSource) -> tuple[str, ...] | None:
        # Servers are asked by URL alone: one answer however many Specs name it.
        key = PermitSource(source.kind, source.url)
        if key not in asked:
            asked[key] = await permitted_by(permits, tenant, source)
        return asked[key]

    problems: list[Problem] = []
    for prefix, node in nested_specs(spec):
        for tool in node.tools:
            kind: PermitKind = "code" if isinstance(tool, CodeTool) else "http"
            permitted = await ask(PermitSource(kind))
            if permitted is not None and not matches(tool.name, permitted):
                problems.append(
                    Problem(
                        f"{prefix}tools[{tool.name}]",
                        f"{kind} tool {tool.name!r} is not permitted to tenant {tenant!r}",
                    )
                )
        connections: list[tuple[str, McpServer | A2APeer, PermitSource]] = [
            (f"{prefix}mcp_servers[{s.name}]", s, PermitSource.of_server(s))
            for s in node.mcp_servers
        ]
        if isinstance(node, AgentSpec):
            connections += [
                (f"{prefix}a2a_peers[{p.name}]", p, PermitSource.of_peer(p)) for p in node.a2a_peers
            ]
        for path, connection, source in connections:
            permitted = await ask(source)
            what = "MCP server" if source.kind == "mcp" else "A2A peer"
            if permitted is None:
                continue
            if not permitted:
                problems.append(
                    Problem(
                        path,
                        f"{what} {connection.name!r} ({connection.url}) is not permitted "
                        f"to tenant {tenant!r}",
                    )
                )
                continue
            for entry in connection.allow:
                if not any(_meet(entry, pattern) is not None for pattern in permitted):
                    problems.append(
                        Problem(
                            f"{path}.allow",
                            f"{entry!r} grants only what tenant {tenant!r} is not permitted "
                            f"of {what} {connection.name!r} (permitted: "
                            f"{', '.join(permitted)})",
                        )
                    )
    return sorted(problems)
