"""``psych validate`` and ``psych publish``, and the Spec checks ``psych run`` shares.

With ``--check-connections`` both connect to every MCP server of the Spec first
(``check_connections``), so an unreachable non-optional server is a problem like any other,
printed with its path, and fetch every A2A peer's Agent Card (``check_spec_peers``: one
line per peer, reachable with its skills after ``allow`` or why not); without it nothing is
connected to and reachability is not judged.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from psych_runtime.activities.egress import EgressPolicy, EgressSettings
from psych_runtime.activities.secrets import EnvSecretResolver
from psych_runtime.specs import (
    AgentSpec,
    Limits,
    Problem,
    PsychError,
    Scope,
    SpecError,
    ToolRegistry,
    ValidationContext,
    WorkflowSpec,
    mcp_connection_key,
    mcp_servers_of,
    nested_specs,
    validate,
)
from psych_runtime.workers._a2a_check import PeerReport, check_spec_peers
from psych_runtime.workers._connections import (
    allow_unmatched,
    check_connections,
    egress_refusals,
    egress_refusals_resolved,
)
from psych_runtime.workers._loading import load_object, load_spec_file
from psych_runtime.workers._settings import worker_a2a, worker_egress
from psych_runtime.workers.cli._parser import store_location


def load_registry(args: argparse.Namespace) -> ToolRegistry | None:
    """The ToolRegistry ``--tools`` names, else ``PSYCH_TOOLS`` (as ``module:attribute`` or
    ``file.py:attribute``), as the worker loads it; None: neither is set.

    Every command that judges or runs a Spec's code tools reads both (validate and publish
    too), so a Spec whose tools live in the ``PSYCH_TOOLS`` modules validates as the worker
    that runs it will see it.

    Raises:
        SpecError: the registry cannot be loaded, or is no ToolRegistry; the message names
            where it was given (``--tools`` or ``PSYCH_TOOLS``).
    """
    reference, source = args.tools, "--tools"
    if not reference:
        reference, source = os.environ.get("PSYCH_TOOLS"), "PSYCH_TOOLS"
    if not reference:
        return None
    try:
        registry = load_object(reference)
    except SpecError as err:
        raise SpecError(f"{source}: {err}") from err
    if not isinstance(registry, ToolRegistry):
        raise SpecError(
            f"{source} {reference!r} is a {type(registry).__name__}, not a ToolRegistry"
        )
    return registry


def _check_scope(tenant: str) -> Scope:
    try:
        return Scope(tenant=tenant)
    except ValidationError as err:
        raise PsychError(
            f"invalid tenant {tenant!r}: use letters, digits, '_' and '.' only"
        ) from err


def checked_spec(
    file: str,
    registry: ToolRegistry | None,
    known_models: Iterable[str] = (),
    *,
    check: argparse.Namespace | None = None,
) -> AgentSpec | WorkflowSpec | None:
    """Load and validate a Spec file; print every problem and return None if there are any.

    Args:
        file: the Spec file.
        registry: the ToolRegistry the workers load (None: no code tool is registered).
        known_models: model ids the endpoint serves (empty: not checked).
        check: the parsed ``--check-connections``/``--tenant``; when it asks, every MCP
            server of the Spec is connected to before validating, and every URL of the
            Spec the egress policy of this environment (``PSYCH_EGRESS_*``, the global
            settings file) refuses for that tenant, its host looked up, is a problem.
            Without it, ``egress_warnings`` names them (``psych validate``/``publish``).

    Raises:
        SpecError: the file cannot be read or parsed (the message names line and column).
    """
    spec = load_spec_file(file)
    connections: Mapping[str, str | None] | None = None
    refused: list[Problem] = []
    peers = PeerReport()
    if check is not None and check.check_connections:
        scope = _check_scope(check.tenant)
        with _check_logs(file, logged=check.verbose):
            connections, refused, peers = _check(spec, file, scope)
    context = ValidationContext(
        registered_tools=registry.names() if registry is not None else (),
        known_models=known_models,
        mcp_connections=connections,
    )
    for line in peers.lines:
        print(f"{file}: {line}")
    for warning in peers.warnings:
        print(f"{file}: warning: {warning}", file=sys.stderr)
    problems = [*validate(spec, context), *refused, *peers.problems]
    for problem in problems:
        print(f"{file}: {problem}", file=sys.stderr)
    if problems:
        print(f"{file}: {len(problems)} problem(s); not valid", file=sys.stderr)
        return None
    return spec


def _check(
    spec: AgentSpec | WorkflowSpec, file: str, scope: Scope
) -> tuple[Mapping[str, str | None], list[Problem], PeerReport]:
    """``--check-connections``: connect to every MCP server and A2A peer of ``spec`` and
    judge its URLs under this environment's egress policy, names looked up; an MCP
    server's ``allow`` entry naming no tool it lists is a problem too."""
    # Imported here: asyncio, the HTTP clients (httpx, httpx2) and the MCP session
    # machinery only connecting needs; plain ``psych validate`` starts without them.
    import asyncio

    from psych_runtime.activities.egress import Egress
    from psych_runtime.activities.mcp import McpSettings, parse_oauth_issuers

    egress = Egress(worker_egress(EgressSettings.from_env()))
    refused = asyncio.run(egress_refusals_resolved(spec, scope=scope, egress=egress))
    # The worker's OAuth issuers, so a server behind OAuth is checked as a Run uses it.
    issuers = parse_oauth_issuers(os.environ.get("PSYCH_MCP_OAUTH_ISSUERS", ""))
    # And their token store (read only), to say whether a token is held for the Scope.
    from psych_runtime.activities.tokens import token_store_from_env
    from psych_runtime.workers._worker import DEFAULT_HOME
    from psych_runtime.workers.cli._stores import closing_stores

    tokens = token_store_from_env(os.environ, Path(DEFAULT_HOME) / "tokens")
    oauth: dict[str, str] = {}
    tools: dict[str, tuple[str, ...]] = {}

    async def checked() -> dict[str, str | None]:
        # Closed in the event loop that used it (an S3 store's client is bound to it).
        async with closing_stores(tokens):
            return await check_connections(
                spec,
                scope=scope,
                secrets=EnvSecretResolver(),
                settings=McpSettings(oauth_issuers=issuers),
                egress=egress,
                tokens=tokens,
                oauth=oauth,
                tools=tools,
            )

    connections = asyncio.run(checked())
    refused += allow_unmatched(spec, tools)
    peers = asyncio.run(_checked_peers(spec, scope))
    told: set[str] = set()
    for server in mcp_servers_of(spec):
        key = mcp_connection_key(server)
        if key in oauth and key not in told:
            told.add(key)
            print(
                f"{file}: mcp server {server.name!r} ({server.url}) oauth: {oauth[key]}",
                file=sys.stderr,
            )
    return connections, refused, peers


STORE_LOGGERS = frozenset(
    {"psych_runtime.activities.blobs._disk", "psych_runtime.activities.blobs._s3_client"}
)
"""The loggers of a store that did not answer (a local one's disk, S3), whose warnings
name where it is; by name, as importing them would import the stores for every command (a
test keeps each name its logger's)."""


@contextmanager
def _check_logs(file: str, *, logged: bool) -> Iterator[None]:
    """While a connection check runs, what psych logs at warning or worse is printed as
    ``file``'s warnings, in the form of every other line (with no logging set up, Python
    printed the bare message). The egress port's refusals are left out: each connection the
    check makes through it reports its refusal at its path, as a problem or a warning. So
    are the stores' own warnings (``STORE_LOGGERS``), which name where the store is (its
    directory, its bucket and endpoint): the check's line for the server says what failed,
    naming the store's kind and the record's key, and where a store is is for its log.

    Not when the command prints its log records itself (``logged``: ``--verbose``): each
    record reached both handlers (this one's logger propagates to the root's), so it was
    printed twice, and an info or debug record was printed as a warning."""
    if logged:
        yield
        return
    from psych_runtime.activities.egress import EgressDenied

    def told_elsewhere(record: logging.LogRecord) -> bool:
        if record.name in STORE_LOGGERS:
            return False
        return not any(isinstance(arg, EgressDenied) for arg in _args(record))

    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(f"{file}: warning: %(message)s"))
    handler.addFilter(told_elsewhere)
    logger = logging.getLogger("psych_runtime")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _args(record: logging.LogRecord) -> tuple[object, ...]:
    args = record.args
    return args if isinstance(args, tuple) else ()


async def _checked_peers(spec: AgentSpec | WorkflowSpec, scope: Scope) -> PeerReport:
    """The Spec's A2A peers checked as a worker of this environment would reach them: its
    egress policy, ``PSYCH_SECRET_*`` credentials, the settings file's ``a2a`` timeouts."""
    from psych_runtime.activities.a2a import A2aSettings
    from psych_runtime.activities.egress import Egress

    egress = Egress(worker_egress(EgressSettings.from_env()))
    try:
        return await check_spec_peers(
            spec,
            scope=scope,
            secrets=EnvSecretResolver(),
            egress=egress,
            settings=worker_a2a(A2aSettings()),
        )
    finally:
        await egress.aclose()


def _limit_warnings(limits: Limits, path: str, *, agent: bool) -> list[str]:
    """Where one of ``limits`` makes another unreachable (when the Spec sets either); an
    agent's only: a WorkflowRun has no turns and no model, and each pair judged here has a
    field it does not read (``specs._workflow_fields``: a problem when set)."""
    found: list[str] = []
    given = limits.model_fields_set if agent else set()
    if {"max_steps", "max_turns"} & given and limits.max_steps < 2 * limits.max_turns - 1:
        # A turn after the first starts only after the previous one's tool calls, so turn
        # N begins after at least 2(N-1) steps: a model call and a tool call per turn.
        turns = (limits.max_steps + 1) // 2
        found.append(
            f"{path}limits.max_turns: {limits.max_turns} turns need at least "
            f"{2 * limits.max_turns - 1} steps (a model call and a tool call per turn), but "
            f"max_steps is {limits.max_steps}: at most {turns} turns are reachable (only "
            "follow-up messages add turns without a tool call)"
        )
    streak = {"failure_streak_threshold", "failure_streak_hard_stop"}
    if streak & given and limits.failure_streak_hard_stop <= limits.failure_streak_threshold:
        found.append(
            f"{path}limits.failure_streak_threshold: {limits.failure_streak_threshold} is "
            f"never reached: the Run fails at failure_streak_hard_stop "
            f"({limits.failure_streak_hard_stop}) first, so a failing tool is never withheld"
        )
    repeat = {"repeat_call_threshold", "repeat_call_hard_stop"}
    if repeat & given and limits.repeat_call_hard_stop <= limits.repeat_call_threshold:
        found.append(
            f"{path}limits.repeat_call_hard_stop: {limits.repeat_call_hard_stop} is not above "
            f"repeat_call_threshold ({limits.repeat_call_threshold}): the first refused repeat "
            "stops the Run, so the model is never told to change approach"
        )
    return found


def limit_warnings(spec: AgentSpec | WorkflowSpec, path: str = "") -> list[str]:
    """Limits of ``spec`` (and of every Spec nested in it) that make another unreachable.

    Only limits a Spec sets are judged: the defaults are a budget, not a plan.
    """
    return [
        warning
        for prefix, node in nested_specs(spec, path)
        for warning in [
            *_limit_warnings(node.limits, prefix, agent=isinstance(node, AgentSpec)),
            *_fallback_warnings(node, prefix),
        ]
    ]


def _fallback_warnings(node: AgentSpec | WorkflowSpec, path: str) -> list[str]:
    """Fallbacks no attempt reaches: each attempt on one spends one of the transient
    budget. A warning, not a problem: such a Spec runs (its fallbacks unused), and a
    Version published before this was said is still started, and composes spawned
    children inside Runs already in flight (a problem would refuse them on replay)."""
    if not isinstance(node, AgentSpec) or not node.model.fallbacks:
        return []
    if node.limits.transient_retry_budget != 0:
        return []
    return [
        f"{path}model.fallbacks: never tried: limits.transient_retry_budget is 0, and each "
        "attempt on a fallback spends one of it; raise the budget or leave the fallbacks out"
    ]


def egress_warnings(spec: AgentSpec | WorkflowSpec, args: argparse.Namespace) -> list[str]:
    """The Spec's URLs the egress policy of this environment refuses for ``--tenant``
    (address literals, ``localhost``, host patterns; no lookup). Warnings, not problems:
    the worker that runs the Spec may be configured otherwise (``psych dev`` allows
    loopback); ``--check-connections`` makes them problems."""
    if args.check_connections:
        return []  # already problems
    policy = EgressPolicy(worker_egress(EgressSettings.from_env()))
    return [str(p) for p in egress_refusals(spec, scope=_check_scope(args.tenant), policy=policy)]


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a Spec file; print every problem; exit 1 if there are any.

    Limits that make another unreachable (fallbacks under no transient budget too), and
    URLs the egress policy of this environment refuses, are warnings (standard error), not
    problems.
    """
    spec = checked_spec(args.file, load_registry(args), args.known_model or (), check=args)
    if spec is None:
        return 1
    for warning in [*limit_warnings(spec), *egress_warnings(spec, args)]:
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
    print(f"{args.file}: valid")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Validate, then publish a Spec file to the version store; print its hash."""
    # Imported here: the version store loads the Temporal SDK, which validate never needs.
    from psych_runtime.activities.versions import version_store_at

    spec = checked_spec(args.file, load_registry(args), args.known_model or (), check=args)
    if spec is None:
        return 1
    for warning in egress_warnings(spec, args):
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
    from psych_runtime.workers.cli._stores import close_version_store

    where, source = store_location(args)
    store = version_store_at(where, source=source)
    try:
        version = store.publish(spec)
    finally:
        close_version_store(store)
    print(f"{version.hash}  {spec.kind} {spec.name}  published {version.published_at.isoformat()}")
    return 0
