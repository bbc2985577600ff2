"""How ``psych`` logs: one policy for every command, set by ``main`` before it runs.

A command that serves until stopped (``SERVING``: ``worker``, ``dev``, ``serve``,
``oauth-callback``, ``codec-server``) logs to its console as it sets up, one line per
record: psych's own info records (where it listens, for whom) and every library's warnings
and worse (``console_logging``): ``worker`` and ``dev`` with an exception as a clause of
its line (``--verbose`` adds tracebacks and the SDK's debug records); ``serve``,
``oauth-callback`` and ``codec-server`` with its traceback after the line, since an
internal error's details are there (``serving_logging``; ``--verbose`` adds the info
records, their HTTP server's among them, and psych's and the SDK's debug ones). Each takes
``--quiet`` too (``add_serving_log_options``): warnings and worse only, psych's as well.

A one-shot command (every other) prints no log record unless ``--verbose``: its outcome
and its failure are its own lines (a failure is the one ``psych:`` line, with what the
operator needs), and a library's warning for the same failure was printed as a second,
bare line by Python's last-resort handler (a version store's disk error, naming its
path). With ``--verbose`` its records are printed as a worker's verbose console prints
them: one line each, at info and worse (the SDK's and psych's debug records too), with
tracebacks. The exception: the warnings of the loggers in ``SHOWN``, which say what the
command's output does not (a listing that read past other tenants' Runs and ended short
prints a short page as any other), are printed without ``--verbose`` too, one
``psych: warning:`` line each on standard error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TypedDict

SERVING = frozenset({"worker", "dev", "serve", "oauth-callback", "codec-server"})
"""The commands that serve until stopped, and log to their console as they set up."""

SHOWN = ("psych_runtime.workflows.client._listing",)
"""The loggers whose warnings a one-shot command prints without ``--verbose``: they say
what the command's output does not (``PsychClient``'s listing: the visibility store
answered other tenants' Runs, and the page ended short). By name: importing them here
would import Temporal for every command (a test keeps each name its logger's)."""

_QUIET = logging.NullHandler()
"""The root logger's handler for a one-shot command: found, it keeps Python's last-resort
handler from printing a record no handler took."""


class _ShownHandler(logging.Handler):
    """A ``SHOWN`` logger's warning (or worse) as one ``psych: warning:`` line on standard
    error: the one there when it is written (a test's capture, in-process), not when this
    was made."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record's line."""
        try:
            line = f"psych: {record.levelname.lower()}: {record.getMessage()}"
            print(line, file=sys.stderr, flush=True)
        except Exception:
            self.handleError(record)


_SHOWN = _ShownHandler()
"""Their handler, on each of them for a one-shot command without ``--verbose``."""

VERBOSE_HELP = (
    "print the log records of psych and the libraries it uses, one line each with "
    "tracebacks (default: only the warnings about what the command printed, such as a "
    "listing cut short; a failure is the one psych: line)"
)


def add_verbose_options(parser: argparse.ArgumentParser, skipped: frozenset[str] = SERVING) -> None:
    """Give every one-shot command of ``parser`` (nested ones too: ``deploy promote``)
    ``--verbose``; the ``SERVING`` commands (``skipped``) have their own options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                if name not in skipped:
                    add_verbose_options(command, frozenset())
            return
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def command_logging(args: argparse.Namespace) -> None:
    """Set how the command ``args`` names logs (the module docstring); a ``SERVING``
    command sets it up itself."""
    if args.command in SERVING:
        return
    if args.verbose:
        console_logging(verbose=True)
        return
    if _QUIET not in logging.getLogger().handlers:
        logging.getLogger().addHandler(_QUIET)
    for name in SHOWN:
        logging.getLogger(name).addHandler(_SHOWN)


class ConsoleFormatter(logging.Formatter):
    """One line per log record: time, level, message and the Run it concerns.

    Expected failures (a model endpoint down, a tool raising) are logged with their
    exception; on a console that meant a traceback per failed call, hundreds of lines for
    one unreachable endpoint. Without ``verbose`` the exception is one clause of the line
    (its type and message); with it the traceback follows the line.
    """

    def __init__(self, *, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line (plus its traceback when verbose)."""
        time = self.formatTime(record, "%H:%M:%S")
        line = f"{time} {record.levelname.lower()}: {record.getMessage()}"
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            line += (
                f": {type(error).__name__}: {error}" if str(error) else f": {type(error).__name__}"
            )
        context = getattr(record, "temporal_activity", None) or getattr(
            record, "temporal_workflow", None
        )
        if isinstance(context, dict) and context.get("workflow_id"):
            line += f" [{context['workflow_id']}]"
        if error is not None and self.verbose and record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def console_logging(*, verbose: bool, quiet: bool = False, tracebacks: bool | None = None) -> None:
    """Log to standard error one line per record (``ConsoleFormatter``), for this process.

    The Run's id moves from the message (where the SDK appends its whole context dict) to
    the line's end. psych's own info records are printed (a serving command's: where it
    listens), a library's only from warning up. ``verbose`` adds the libraries' info
    records and the SDK's and psych's debug records, among them the tracebacks of failures
    the SDK logs at debug level (a model call's, which the workflow handles); ``quiet``
    leaves only warnings and worse, psych's too; ``tracebacks`` (default: ``verbose``)
    prints an exception's traceback after its line.

    Raises:
        ValueError: both ``verbose`` and ``quiet`` (the parser refuses them together).
    """
    if verbose and quiet:
        raise ValueError("console_logging: verbose and quiet together")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleFormatter(verbose=verbose if tracebacks is None else tracebacks))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    for name in SHOWN:  # printed by this handler now, once
        logging.getLogger(name).removeHandler(_SHOWN)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("temporalio").setLevel(logging.DEBUG if verbose else logging.NOTSET)
    own = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.getLogger("psych_runtime").setLevel(own)
    from temporalio import activity, workflow  # a command's logs, not only a worker's

    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False


SERVING_VERBOSE_HELP = (
    "also log the libraries' info records (the HTTP server's among them) and psych's and "
    "the SDK's debug records (default: psych's info records, such as where it listens, and "
    "every warning and error, each error with its traceback)"
)
"""``--verbose`` of ``serve``, ``oauth-callback`` and ``codec-server``."""


QUIET_HELP = (
    "log only warnings and errors (default: psych's info records too, such as where it listens)"
)
"""``--quiet`` of every ``SERVING`` command."""


def add_serving_log_options(
    parser: argparse.ArgumentParser, verbose_help: str = SERVING_VERBOSE_HELP
) -> None:
    """Give a ``SERVING`` command (or the parent parser of ``worker`` and ``dev``)
    ``--verbose`` and ``--quiet``, which argparse refuses together, naming both."""
    levels = parser.add_mutually_exclusive_group()
    levels.add_argument("--verbose", action="store_true", help=verbose_help)
    levels.add_argument("--quiet", action="store_true", help=QUIET_HELP)


def serving_logging(*, verbose: bool, quiet: bool = False) -> None:
    """How ``serve``, ``oauth-callback`` and ``codec-server`` log: ``console_logging``,
    with tracebacks even without ``verbose``: what fails in them is an internal error (a
    request's answer says no more than that), whose details are its log's.

    Their uvicorn is given no logging config of its own (``log_config=None``), so its
    records come here too, in the same form: see ``uvicorn_options``.
    """
    console_logging(verbose=verbose, quiet=quiet, tracebacks=True)


KEEP_ALIVE_SECONDS = 75
"""How long a serving command keeps an idle keep-alive connection open. uvicorn's own 5 s
equals httpx's ``keepalive_expiry``: a client that sent its next request on a connection
idle for about 5 s met the server closing it (``ReadError``, a POST not sent again), and
a load balancer keeps its idle connections longer still (60 s is AWS ALB's default), so
the server, not the balancer, closed them under it (a 502). Past the usual balancers'
and clients' idle timeouts, as nginx's default (75 s)."""


class UvicornOptions(TypedDict):
    """The arguments of ``uvicorn.Config`` a serving command sets."""

    log_config: None
    log_level: str
    access_log: bool
    timeout_keep_alive: int


def uvicorn_options(verbose: bool) -> UvicornOptions:
    """How a serving command's uvicorn logs: through this module's handler (no logging
    config of its own), its info records (its start) only with ``--verbose``, and no
    access log: a request's line holds its query, and the OAuth callback's holds the
    authorization code; and how long it keeps an idle connection (``KEEP_ALIVE_SECONDS``)."""
    level = "info" if verbose else "warning"
    return UvicornOptions(
        log_config=None, log_level=level, access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS
    )
