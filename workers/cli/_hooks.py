"""``psych hooks check``: load the settings files as a worker would, and print the chain.

It reads the same files with the same trust rules (``workers/_settings.py``) and binds
them (importing trusted Python hooks), so what it prints is what ``psych worker`` with the
same ``--settings`` and ``--trust-project-settings`` would run; any problem is printed,
every one the files have, and the exit status is 1 (``psych``'s error path).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from psych_runtime.activities.hooks import STAGES, CommandHook, Hooks
from psych_runtime.workers._settings import (
    HookDeclaration,
    LoadedSettings,
    bind_settings,
    default_global_settings,
    load_settings,
)


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """``--settings FILE`` and ``--trust-project-settings``, for worker, dev and hooks."""
    parser.add_argument(
        "--settings",
        type=Path,
        metavar="FILE",
        help="the global settings file (tool-call hooks, trusted modules; overrides "
        f"PSYCH_SETTINGS; default {default_global_settings()} when it exists)",
    )
    parser.add_argument(
        "--trust-project-settings",
        action="store_true",
        help="also load ./.psych/settings.yaml (its hooks run in the worker; it cannot "
        "trust modules)",
    )


def add_hooks_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``hooks check`` to ``psych``."""
    hooks = commands.add_parser("hooks", help="tool-call hooks from the settings files")
    actions = hooks.add_subparsers(dest="hooks_command", required=True)
    check = actions.add_parser(
        "check",
        help="load the settings files and print the hook chain",
        description="Load the global settings file (and the project one when trusted) "
        "as a worker would, import the trusted Python hooks, and print the resolved chain "
        "per stage and tool pattern, or every problem (exit status 1).",
    )
    add_settings_arguments(check)
    check.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME",
        help="also print the chain this tool's calls run through (repeatable; MCP tools "
        "as server__tool)",
    )
    check.set_defaults(func=cmd_hooks_check)


def cmd_hooks_check(args: argparse.Namespace) -> int:
    """Print the chain; problems raise (SpecError, AccessDenied) and ``psych`` prints them."""
    loaded = load_settings(args.settings, trust_project_settings=args.trust_project_settings)
    chain = bind_settings(loaded)
    print(describe(loaded, chain, args.tool))
    return 0


def describe(loaded: LoadedSettings, chain: Hooks, tools: list[str]) -> str:
    """What ``psych hooks check`` prints."""
    lines: list[str] = []
    by_scope = {file.scope: file for file in loaded.files}
    glob = by_scope.get("global")
    lines.append(f"global settings: {glob.path if glob else 'none'}")
    if "project" in by_scope:
        lines.append(f"project settings: {by_scope['project'].path} (trusted)")
    elif loaded.skipped_project is not None:
        lines.append(
            f"project settings: {loaded.skipped_project} NOT LOADED (not trusted; pass "
            "--trust-project-settings to load it)"
        )
    else:
        lines.append("project settings: none")
    lines.append(f"trusted modules: {', '.join(loaded.trusted_modules) or 'none'}")
    declared = [d for file in loaded.files for d in file.hooks]
    for stage in STAGES:
        entries = [d for d in declared if d.stage == stage]
        lines.append(f"{stage}:" + ("" if entries else " none"))
        lines.extend(f"  {d.pattern}: {_entry(d)}  [{d.where}]" for d in entries)
    for tool in tools:
        lines.append(f"tool {tool}:")
        for stage in STAGES:
            names = [hook.name for hook in chain.for_tool(stage, tool)]
            lines.append(f"  {stage}: {' -> '.join(names) if names else 'none'}")
    return "\n".join(lines)


def _entry(declared: HookDeclaration) -> str:
    if declared.command is not None:
        command = CommandHook(declared.command, declared.timeout_seconds)
        return f"{command.name} (timeout {declared.timeout_seconds:g} s)"
    return f"python {declared.python}"
