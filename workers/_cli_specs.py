"""``psych validate`` and ``psych publish``, and the Spec checks ``psych run`` shares.

With ``--check-connections`` both connect to every MCP server of the Spec first
(``check_connections``), so an unreachable non-optional server is a problem like any other,
printed with its path; without it nothing is connected to and reachability is not judged.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from psych_runtime.activities._secrets import EnvSecretResolver
from psych_runtime.activities._version_store import FileVersionStore
from psych_runtime.specs import (
    AgentSpec,
    PsychError,
    Scope,
    ToolRegistry,
    ValidationContext,
    WorkflowSpec,
    validate,
)
from psych_runtime.workers._connections import check_connections
from psych_runtime.workers._loading import load_object, load_spec_file

DEFAULT_STORE = ".psych/versions"


def load_registry(reference: str | None) -> ToolRegistry | None:
    """The ToolRegistry named ``module:attribute`` or ``file.py:attribute`` (None: none)."""
    if not reference:
        return None
    registry = load_object(reference)
    if not isinstance(registry, ToolRegistry):
        raise PsychError(f"{reference!r} is a {type(registry).__name__}, not a ToolRegistry")
    return registry


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    """``--check-connections`` and the tenant whose credentials it uses."""
    parser.add_argument(
        "--check-connections",
        action="store_true",
        help="connect to every MCP server of the Spec (subagents and steps too); "
        "a non-optional one that does not answer is a problem",
    )
    parser.add_argument(
        "--tenant",
        default=os.environ.get("PSYCH_TENANT", "default"),
        help="the tenant whose credentials (PSYCH_SECRET_<NAME>) --check-connections "
        "connects with (env PSYCH_TENANT, default 'default')",
    )


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
            server of the Spec is connected to before validating.

    Raises:
        SpecError: the file cannot be read or parsed (the message names line and column).
    """
    spec = load_spec_file(file)
    connections: Mapping[str, str | None] | None = None
    if check is not None and check.check_connections:
        connections = asyncio.run(
            check_connections(spec, scope=_check_scope(check.tenant), secrets=EnvSecretResolver())
        )
    context = ValidationContext(
        registered_tools=registry.names() if registry is not None else (),
        known_models=known_models,
        mcp_connections=connections,
    )
    problems = validate(spec, context)
    for problem in problems:
        print(f"{file}: {problem}", file=sys.stderr)
    if problems:
        print(f"{file}: {len(problems)} problem(s); not valid", file=sys.stderr)
        return None
    return spec


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a Spec file; print every problem; exit 1 if there are any."""
    spec = checked_spec(args.file, load_registry(args.registry), args.known_model or (), check=args)
    if spec is None:
        return 1
    print(f"{args.file}: valid")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Validate, then publish a Spec file to the version store; print its hash."""
    spec = checked_spec(args.file, load_registry(args.registry), args.known_model or (), check=args)
    if spec is None:
        return 1
    version = FileVersionStore(args.store).publish(spec)
    print(f"{version.hash}  {spec.kind} {spec.name}  published {version.published_at.isoformat()}")
    return 0
