"""The ``psych`` command line: the parser, and the one place errors become exit statuses.

Commands live beside it: ``_specs`` (validate, publish), ``_runs`` (run, follow, status,
report, list), ``_resume`` (approve, deny, answer, complete, abort, steer),
``_processes`` (worker, dev), ``_serve_command`` (serve, the HTTP API) and
``codec/_server`` (codec-server).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import select
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from psych_runtime.specs import PsychError, Refused
from psych_runtime.workers.cli._fleet import add_fleet_commands
from psych_runtime.workers.cli._hooks import add_hooks_command
from psych_runtime.workers.cli._processes import add_process_commands
from psych_runtime.workers.cli._resume import add_resume_commands
from psych_runtime.workers.cli._runs import add_run_commands
from psych_runtime.workers.cli._schema_command import add_schema_command
from psych_runtime.workers.cli._serve_command import add_serve_command
from psych_runtime.workers.cli._specs import (
    DEFAULT_STORE,
    add_check_arguments,
    cmd_publish,
    cmd_validate,
)
from psych_runtime.workers.codec import add_codec_server_command


def _spec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="Spec file (.yaml, .yml or .json)")
    parser.add_argument(
        "--tools",
        "--registry",  # the first name it had; every other command says --tools
        dest="tools",
        help="ToolRegistry holding the code tools, as module:attribute or file.py:attribute "
        "(--registry is the same)",
    )
    parser.add_argument(
        "--known-model", action="append", help="a model id the endpoint serves (repeatable)"
    )
    add_check_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``psych``."""
    parser = argparse.ArgumentParser(prog="psych", description="psych-runtime command line")
    commands = parser.add_subparsers(dest="command", required=True)

    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--store",
        default=os.environ.get("PSYCH_STORE", DEFAULT_STORE),
        help=f"version store directory (env PSYCH_STORE, default {DEFAULT_STORE})",
    )
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument(
        "--address", help="Temporal server host:port (default: TEMPORAL_ADDRESS, localhost:7233)"
    )
    connection.add_argument(
        "--namespace", help="Temporal namespace (default: TEMPORAL_NAMESPACE, default)"
    )

    validate_cmd = commands.add_parser("validate", help="validate a Spec file")
    _spec_arguments(validate_cmd)
    validate_cmd.set_defaults(func=cmd_validate)

    publish_cmd = commands.add_parser(
        "publish", parents=[store], help="validate and publish a Spec file"
    )
    _spec_arguments(publish_cmd)
    publish_cmd.set_defaults(func=cmd_publish)

    add_run_commands(commands, connection, store)
    add_resume_commands(commands, connection)
    add_process_commands(commands, connection)
    add_serve_command(commands, connection, store)
    add_codec_server_command(commands)
    add_fleet_commands(commands, connection)
    add_hooks_command(commands)
    add_schema_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``psych``; returns the exit status.

    A psych error (a Run's refusal names its kind) or a Temporal RPC failure prints one
    line and returns 1, never a traceback; an interrupt returns 130.
    """
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except Refused as err:
        print(f"psych: refused ({err.kind}): {err}", file=sys.stderr)
        return 1
    except PsychError as err:
        print(f"psych: {err}", file=sys.stderr)
        return 1
    except RPCError as err:
        print(f"psych: Temporal refused: {err.message} ({err.status.name})", file=sys.stderr)
        return 1
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        print(
            f"psych: the Run did not take it: {getattr(cause, 'message', cause)}", file=sys.stderr
        )
        return 1
    except KeyboardInterrupt:
        print("psych: interrupted", file=sys.stderr)
        return 130
    return status


def _reader_gone() -> bool:
    """Whether standard output or error is a pipe whose reader has closed it.

    Linux and the BSDs report POLLERR on the write end of such a pipe, so a BrokenPipeError
    from another pipe (a child process's) is not taken for the output's end.
    """
    poller = select.poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poller.register(stream.fileno(), select.POLLOUT)
        except (ValueError, OSError):  # closed, or not a file
            continue
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _end_as_posix_tools_do() -> NoReturn:
    """End on a closed output pipe as POSIX tools do: killed by SIGPIPE, silently.

    Python ignores SIGPIPE and turns it into BrokenPipeError, which would print a
    traceback; a shell reports 141 (128 + SIGPIPE) for ``psych list | head -1`` as it does
    for ``seq 1000000 | head -1``. Dying by the signal also skips finalization, as
    ``os._exit`` does (see ``entry``).
    """
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.raise_signal(signal.SIGPIPE)
    os._exit(128 + signal.SIGPIPE)  # where the signal cannot end a process


def entry() -> NoReturn:
    """The ``psych`` executable: ``main``, then an exit that never finalizes the interpreter.

    Why: the Temporal SDK's Rust core owns threads (the process-wide Runtime, which has no
    shutdown call) and a client object that, freed during interpreter finalization, calls
    back into Python from one of those threads; the interpreter then aborts with "Fatal
    Python error: PyGILState_Release ... finalizing" (temporalio/sdk-python#300), after the
    right output, in about one run in four on this machine. So clients left unreachable
    are collected while the interpreter is whole, the output and logs are flushed, and
    the process ends with ``os._exit``: once the command is done nothing else needs to run.
    Output piped into a reader that closed it (``| head -1``) ends the process by SIGPIPE.
    """
    try:
        status = main()
    except SystemExit as done:  # argparse's --help (0) and usage errors (2, printed)
        status = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    except BrokenPipeError:
        if _reader_gone():
            _end_as_posix_tools_do()
        traceback.print_exc()  # another pipe broke: a bug to show
        status = 1
    except Exception:  # a bug: its traceback, and exit 1 rather than an abort at exit
        traceback.print_exc()
        status = 1
    gc.collect()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader is gone (`| head`): what was left is not read
            _end_as_posix_tools_do()
        except ValueError:  # closed
            status = status or 1
    os._exit(status)
