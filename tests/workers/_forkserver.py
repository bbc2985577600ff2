"""Run many ``psych`` processes cheaply: import once, then fork one child per command.

A ``psych`` process spends over a second importing before it does anything, so 200 of them
take minutes on two cores. This script (run as its own process, never imported by tests)
imports the CLI once, before any Temporal runtime thread exists, then forks a child per
command. Each child is a whole process that does what the ``psych`` console script does
(``sys.exit(entry())``) and ends the way it would, interpreter finalization included, so
an abort at exit shows as its status (``-6`` for SIGABRT).

Input on stdin, one JSON object: ``{"entry": "module:attr", "commands": [[argv...], ...],
"parallel": N, "output": "<dir>"}``. Output on stdout, one JSON list:
``[{"argv": [...], "status": int, "stdout": str, "stderr": str}, ...]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any


def _child(entry: Any, argv: list[str], out: Path, err: Path) -> None:
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    sys.argv = ["psych", *argv]
    sys.exit(entry())  # exactly the console script's last line


def _command_modules(parser: argparse.ArgumentParser) -> set[str]:
    """The module of every command ``parser`` (and its subcommands) names."""
    found: set[str] = set()
    func = parser.get_default("func")
    if func is not None:
        found.add(func.__module__)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _command_modules(sub)
    return found


def _import_commands() -> None:
    """Import every command's module now: ``psych`` imports one only when its command runs
    (``cli/_lazy.py``), which would have each child import the Temporal SDK again."""
    from psych_runtime.workers.cli._parser import build_parser

    for name in sorted(_command_modules(build_parser())):
        importlib.import_module(name)


def main() -> None:
    request = json.load(sys.stdin)
    module, _, attribute = request["entry"].partition(":")
    entry = getattr(importlib.import_module(module), attribute)
    _import_commands()
    # Forking is only sound while this process has one thread: no Temporal runtime yet.
    assert threading.active_count() == 1, threading.enumerate()
    output = Path(request["output"])
    commands: list[list[str]] = request["commands"]
    running: dict[int, int] = {}
    statuses: dict[int, int] = {}
    for index, argv in enumerate(commands):
        while len(running) >= request["parallel"]:
            pid, wait_status = os.wait()
            statuses[running.pop(pid)] = os.waitstatus_to_exitcode(wait_status)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(entry, argv, output / f"{index}.out", output / f"{index}.err")
        running[pid] = index
    while running:
        pid, wait_status = os.wait()
        statuses[running.pop(pid)] = os.waitstatus_to_exitcode(wait_status)
    results = [
        {
            "argv": argv,
            "status": statuses[index],
            "stdout": (output / f"{index}.out").read_text(errors="replace"),
            "stderr": (output / f"{index}.err").read_text(errors="replace"),
        }
        for index, argv in enumerate(commands)
    ]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
