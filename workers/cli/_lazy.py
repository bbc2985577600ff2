"""Commands named by module and function, imported only when that command runs.

The parser of every command is built on each start (``psych --help`` lists them all), but
a command's module imports what it needs (the Temporal client, the worker, the codec's
cryptography, FastAPI...), so only the command that runs imports its module.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

Command = Callable[[argparse.Namespace], int]


def lazy(module: str, name: str) -> Command:
    """The command ``name`` of ``module``, imported when it is called."""

    def command(args: argparse.Namespace) -> int:
        run: Command = getattr(importlib.import_module(module), name)
        return run(args)

    command.__qualname__ = command.__name__ = name
    command.__module__ = module
    return command
