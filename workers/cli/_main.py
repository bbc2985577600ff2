"""The ``psych`` command line: the one place errors become exit statuses.

The parser is ``_parser`` (and ``_parser_serving``); commands live beside it: ``_specs``
(validate, publish), ``_schema_command`` (schema), ``_runs`` (run, follow, status, report,
list), ``_resume`` (approve, deny, answer, complete, abort, steer), ``_processes`` (worker,
dev), ``_serve_command`` (serve, the HTTP API), ``_fleet`` (replay, deploy promote),
``_hooks`` (hooks check) and ``codec/_server`` (codec-server). Each is imported only when
its command runs. ``_logging`` sets what every command logs before it runs.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from psych_runtime.workers._exit import flush_for_exit
from psych_runtime.workers.cli._logging import command_logging
from psych_runtime.workers.cli._parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``psych``; returns the exit status.

    A psych error (a Run's refusal names its kind), a Temporal RPC failure or an S3
    store's refusal prints one line and returns 1, never a traceback; an interrupt
    returns 130. What the command logs is printed as ``_logging`` says (a one-shot
    command: nothing, unless ``--verbose``).
    """
    args = build_parser().parse_args(argv)
    command_logging(args)
    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        print("psych: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        refusal = _psych_refusal(err) or _temporal_refusal(err) or _s3_refusal(err)
        if refusal is None:
            raise
        print(refusal, file=sys.stderr)
        return 1
    return status


def _psych_refusal(err: Exception) -> str | None:
    """The one line for a psych error (a Run's refusal names its kind); None for another.

    Every psych error is defined in ``psych_runtime.specs``: when a command never loaded
    it (``psych --help``), ``err`` is none of them and nothing is imported.
    """
    if "psych_runtime.specs" not in sys.modules:
        return None
    from psych_runtime.specs import PsychError, Refused, StoreUnavailable

    if isinstance(err, Refused):
        return f"psych: refused ({err.kind}): {err}"
    if isinstance(err, StoreUnavailable) and err.detail:
        # The operator's own command: where the store is helps, and no Run's caller sees it.
        return f"psych: {err}; {err.detail}"
    if isinstance(err, PsychError):
        return f"psych: {err}"
    return None


def _temporal_refusal(err: Exception) -> str | None:
    """The one line for a Temporal RPC failure or a rejected update; None for another error.

    Only commands that talk to Temporal import ``temporalio``, and only they can raise its
    errors: when it is not loaded, ``err`` is none of them and nothing is imported.
    """
    if "temporalio" not in sys.modules:
        return None
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    if "psych_runtime.workflows" in sys.modules:
        from psych_runtime.workflows import (
            TemporalCancelled,
            TemporalUnanswered,
            UpdateEndedByTemporal,
            UpdateUnanswered,
        )

        # Not a refusal: no answer in time (an update's: no worker took it), or a read or
        # an update Temporal ended with a timeout's status.
        said = TemporalUnanswered | UpdateUnanswered | TemporalCancelled | UpdateEndedByTemporal
        if isinstance(err, said):
            return f"psych: {err.why}"
    if isinstance(err, RPCError):
        if "psych_runtime.workflows" in sys.modules:
            from psych_runtime.workflows import TemporalUnanswered

            if isinstance(err, TemporalUnanswered):  # not a refusal: its silence
                return f"psych: {err.why}"
        return f"psych: Temporal refused: {err.message} ({err.status.name})"
    if isinstance(err, WorkflowUpdateFailedError):
        cause = err.cause
        return f"psych: the Run did not take it: {getattr(cause, 'message', cause)}"
    return None


def _s3_refusal(err: Exception) -> str | None:
    """The one line for an S3 store's failure (``--store``/``PSYCH_STORE`` an ``s3://`` URL:
    a bucket that does not exist, credentials refused, an endpoint nothing answers at);
    None for another error.

    Only a command that opened an S3 store imports botocore: when it is not loaded, ``err``
    is none of its errors and nothing is imported.
    """
    if "botocore" not in sys.modules:
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(err, ClientError):
        return f"psych: S3 refused: {err}"
    if isinstance(err, BotoCoreError):
        return f"psych: S3: {err}"  # no answer, no credentials, a bad endpoint
    return None


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

    Why: see ``psych_runtime.workers.exit_process`` (the Temporal SDK's Rust threads abort a
    finalizing interpreter, temporalio/sdk-python#300). Output piped into a reader that
    closed it (``| head -1``) ends the process by SIGPIPE, as POSIX tools do.
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
    try:
        status = flush_for_exit(status)
    except BrokenPipeError:  # the reader is gone (`| head`): what was left is not read
        _end_as_posix_tools_do()
    os._exit(status)
