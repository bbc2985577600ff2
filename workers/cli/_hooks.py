"""``psych hooks check``: load the settings files as a worker would, and print the chain.

It reads the same files with the same trust rules (``workers/_settings.py``) and binds
them (importing trusted Python hooks), so what it prints is what ``psych worker`` with the
same ``--settings`` and ``--trust-project-settings`` would run; any problem is printed,
every one the files have, and the exit status is 1 (``psych``'s error path).
"""

from __future__ import annotations

import argparse

from psych_runtime.activities.hooks import STAGES, CommandHook, Hooks
from psych_runtime.workers._settings import (
    HookDeclaration,
    LoadedSettings,
    bind_settings,
    load_settings,
)


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
