"""The ``psych`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from psych_runtime.activities._version_store import FileVersionStore
from psych_runtime.specs import (
    PsychError,
    ToolRegistry,
    ValidationContext,
    validate,
)
from psych_runtime.workers._loading import load_object, load_spec_file

DEFAULT_STORE = ".psych/versions"


def _context(args: argparse.Namespace) -> ValidationContext:
    registered: frozenset[str] = frozenset()
    if args.registry:
        registry = load_object(args.registry)
        if not isinstance(registry, ToolRegistry):
            raise PsychError(
                f"{args.registry!r} is a {type(registry).__name__}, not a ToolRegistry"
            )
        registered = registry.names()
    return ValidationContext(registered_tools=registered, known_models=args.known_model or ())


def _check(args: argparse.Namespace) -> int:
    spec = load_spec_file(args.file)
    problems = validate(spec, _context(args))
    for problem in problems:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.file}: {len(problems)} problem(s); not valid", file=sys.stderr)
    return 1 if problems else 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a Spec file; print every problem; exit 1 if there are any."""
    status = _check(args)
    if status == 0:
        print(f"{args.file}: valid")
    return status


def cmd_publish(args: argparse.Namespace) -> int:
    """Validate, then publish a Spec file to the version store; print its hash."""
    status = _check(args)
    if status:
        return status
    version = FileVersionStore(args.store).publish(load_spec_file(args.file))
    spec = version.spec
    print(f"{version.hash}  {spec.kind} {spec.name}  published {version.published_at.isoformat()}")
    return 0


def _spec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="Spec file (.yaml, .yml or .json)")
    parser.add_argument(
        "--registry",
        help="ToolRegistry holding the code tools, as module:attribute or file.py:attribute",
    )
    parser.add_argument(
        "--known-model", action="append", help="a model id the endpoint serves (repeatable)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``psych``."""
    parser = argparse.ArgumentParser(prog="psych", description="psych-runtime command line")
    commands = parser.add_subparsers(dest="command", required=True)

    validate_cmd = commands.add_parser("validate", help="validate a Spec file")
    _spec_arguments(validate_cmd)
    validate_cmd.set_defaults(func=cmd_validate)

    publish_cmd = commands.add_parser("publish", help="validate and publish a Spec file")
    _spec_arguments(publish_cmd)
    publish_cmd.add_argument(
        "--store",
        default=os.environ.get("PSYCH_STORE", DEFAULT_STORE),
        help=f"version store directory (env PSYCH_STORE, default {DEFAULT_STORE})",
    )
    publish_cmd.set_defaults(func=cmd_publish)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``psych``; returns the exit status (1 on any psych error, printed, no traceback)."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except PsychError as err:
        print(f"psych: {err}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
