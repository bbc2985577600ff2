"""``psych validate`` and ``psych publish``, and the Spec checks ``psych run`` shares."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from psych_runtime.activities._version_store import FileVersionStore
from psych_runtime.specs import (
    AgentSpec,
    PsychError,
    ToolRegistry,
    ValidationContext,
    WorkflowSpec,
    validate,
)
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


def checked_spec(
    file: str, registry: ToolRegistry | None, known_models: Iterable[str] = ()
) -> AgentSpec | WorkflowSpec | None:
    """Load and validate a Spec file; print every problem and return None if there are any.

    Raises:
        SpecError: the file cannot be read or parsed (the message names line and column).
    """
    spec = load_spec_file(file)
    context = ValidationContext(
        registered_tools=registry.names() if registry is not None else (),
        known_models=known_models,
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
    spec = checked_spec(args.file, load_registry(args.registry), args.known_model or ())
    if spec is None:
        return 1
    print(f"{args.file}: valid")
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Validate, then publish a Spec file to the version store; print its hash."""
    spec = checked_spec(args.file, load_registry(args.registry), args.known_model or ())
    if spec is None:
        return 1
    version = FileVersionStore(args.store).publish(spec)
    print(f"{version.hash}  {spec.kind} {spec.name}  published {version.published_at.isoformat()}")
    return 0
