"""The parser of ``psych``: every command's arguments, none of its imports.

Each command is named by its module and function (``lazy``) and imported when it runs, so
building the parser costs only argparse: ``psych --help`` and ``psych validate`` start
without importing Temporal, OpenTelemetry, MCP, cryptography or FastAPI. The serving and
fleet commands' arguments are in ``_parser_serving``.
"""

from __future__ import annotations

import argparse
import getpass
import math
import os
from pathlib import Path

from psych_runtime.workers.cli._lazy import lazy
from psych_runtime.workers.cli._logging import add_verbose_options
from psych_runtime.workers.cli._parser_serving import (
    add_codec_server_command,
    add_fleet_commands,
    add_hooks_command,
    add_process_commands,
    add_serve_command,
)

RUN_STATUSES = (
    "running",
    "suspended",
    "completed",
    "stopped",
    "failed",
    "force_settled",
    "aborted",
    "abandoned",
)
"""``RunStatus``'s values (workflows' enum, which imports Temporal; a test keeps them equal)."""


DEFAULT_STORE = ".psych/versions"


def store_location(args: argparse.Namespace) -> tuple[str, str]:
    """The version store a command uses and where that was said, for its messages:
    ``--store``, else ``PSYCH_STORE``, else ``DEFAULT_STORE``."""
    if args.store is not None:
        return args.store, "--store"
    if os.environ.get("PSYCH_STORE"):
        return os.environ["PSYCH_STORE"], "PSYCH_STORE"
    return DEFAULT_STORE, "the default version store"


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


def default_principal() -> str | None:
    """Who acts, unless ``--principal`` says: ``PSYCH_PRINCIPAL``, else the OS user name."""
    if os.environ.get("PSYCH_PRINCIPAL"):
        return os.environ["PSYCH_PRINCIPAL"]
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in this environment (some containers)
        return None


def tenant_arguments() -> argparse.ArgumentParser:
    """The ``--tenant`` option every Run command takes (a parent parser)."""
    tenant = argparse.ArgumentParser(add_help=False)
    tenant.add_argument(
        "--tenant",
        default=os.environ.get("PSYCH_TENANT", "default"),
        help="the tenant the Runs belong to (env PSYCH_TENANT, default 'default')",
    )
    return tenant


_FULL_HELP = "show model text, tool arguments and tool results whole, not shortened"


def add_run_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
    store: argparse.ArgumentParser,
) -> None:
    """Add ``run``, ``follow``, ``status``, ``report`` and ``list`` to ``psych``."""
    parents = [connection, tenant_arguments()]

    run = commands.add_parser(
        "run",
        parents=[*parents, store],
        help="publish a Spec, run it, print its records and report",
    )
    run.add_argument("file", help="agent or workflow Spec file (.yaml, .yml or .json)")
    run.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="TEXT",
        help="the user's message (repeat for several messages)",
    )
    run.add_argument("--idempotency-key", help="the same tenant and key reach the same Run")
    run.add_argument(
        "--principal",
        default=default_principal(),
        help="who starts the Run, in its Scope on every record and port call (env "
        "PSYCH_PRINCIPAL, default: the OS user name)",
    )
    run.add_argument(
        "--label",
        action="append",
        type=_label,
        metavar="KEY=VALUE",
        help="a label of the Run's Scope, on every record and port call (repeat for several)",
    )
    run.add_argument(
        "--thread",
        metavar="RUN",
        help="continue the conversation of an earlier Run of the tenant (psych-<tenant>-<id>), "
        "its last limits.max_history_records messages",
    )
    run.add_argument(
        "--tools",
        "--registry",  # validate's and publish's old name, accepted everywhere
        dest="tools",
        help="ToolRegistry of the code tools, module:attribute or file.py:attribute "
        "(env PSYCH_TOOLS; --registry is the same)",
    )
    run.add_argument(
        "--task-queue",
        default=os.environ.get("PSYCH_TASK_QUEUE", "psych"),
        help="the task queue workers poll (env PSYCH_TASK_QUEUE, default psych)",
    )
    run.add_argument(
        "--roles-apart",
        action="store_true",
        # PSYCH_ROLES_APART is read when the command runs (roles_apart_of), so a bad value
        # is refused by run and serve as by worker, and by no other command.
        help="schedule each activity on its role's task queue whatever the fleet says (env "
        "PSYCH_ROLES_APART=1; default: as the fleet's workflows workers say, the role queues "
        "when they run roles apart)",
    )
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument("--full", action="store_true", help=_FULL_HELP)
    run.set_defaults(func=lazy("psych_runtime.workers.cli._runs", "cmd_run"))

    follow = commands.add_parser(
        "follow",
        parents=parents,
        help="follow a Run: its records so far and as they come, then its report",
    )
    follow.add_argument("run_id", metavar="RUN_ID", help="the Run's id, psych-<tenant>-<id>")
    follow.add_argument("--json", action="store_true", help="print the report as JSON")
    follow.add_argument("--full", action="store_true", help=_FULL_HELP)
    follow.set_defaults(func=lazy("psych_runtime.workers.cli._runs", "cmd_follow"))

    state = commands.add_parser("status", parents=parents, help="print a Run's current state")
    state.add_argument("run_id", metavar="RUN_ID", help="the Run's id, psych-<tenant>-<id>")
    state.add_argument("--json", action="store_true", help="print the state as JSON")
    state.set_defaults(func=lazy("psych_runtime.workers.cli._runs", "cmd_status"))

    report = commands.add_parser("report", parents=parents, help="print a Run's report")
    report.add_argument("run_id", metavar="RUN_ID", help="the Run's id, psych-<tenant>-<id>")
    shown = report.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the whole report as JSON")
    shown.add_argument(
        "--transcript",
        action="store_true",
        help="print the conversation as the model saw it: system prompt, messages, tool "
        "calls and results, approvals, answers, steering",
    )
    report.add_argument(
        "--format",
        choices=["text", "md"],
        default="text",
        help="the transcript as text for the terminal (default) or as Markdown",
    )
    report.add_argument(
        "--inputs",
        action="store_true",
        help="also print what each model call was sent: its system prompt as sent and its "
        "messages, read from the blob store the workers write (PSYCH_BLOB_DIR or "
        "PSYCH_BLOB_URL); with --json, in each model call's system_prompt and messages",
    )
    report.add_argument(
        "--turn",
        type=int,
        action="append",
        metavar="N",
        help="with --inputs: only the model calls of turn N (repeatable)",
    )
    report.set_defaults(func=lazy("psych_runtime.workers.cli._runs", "cmd_report"))

    listing = commands.add_parser("list", parents=parents, help="list the tenant's Runs")
    listing.add_argument("--agent", help="only Runs of this agent")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("--status", choices=RUN_STATUSES, help="only Runs in this status")
    which.add_argument(
        "--suspended",
        action="store_true",
        help="only suspended Runs, each with what it waits on, until when, and how to resume it",
    )
    listing.add_argument(
        "--limit",
        type=int,
        default=100,
        help="at most this many, newest first (default 100; 0 = all); a cut list says so "
        "and prints the --cursor that lists the next ones",
    )
    listing.add_argument(
        "--cursor",
        help="go on from where an earlier listing with the same filters ended (the cursor "
        "it printed)",
    )
    listing.set_defaults(func=lazy("psych_runtime.workers.cli._runs", "cmd_list"))


RUN_ID_HELP = "the Run's id, psych-<tenant>-<id>"


CALL_ID_HELP = "the pending tool call's id (psych list --suspended shows it)"


def add_resume_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """Add ``approve``, ``deny``, ``answer``, ``complete``, ``abort`` and ``steer``."""
    actor = argparse.ArgumentParser(add_help=False)
    actor.add_argument(
        "--principal",
        default=default_principal(),
        help="who acts, recorded on the Run (env PSYCH_PRINCIPAL, default: the OS user name)",
    )
    actor.add_argument(
        "--idempotency-key",
        metavar="KEY",
        type=_idempotency_key,
        help="your name for this request: run again with the same key (after a timeout, an "
        "interrupt), it is applied at most once and prints the first outcome",
    )
    actor.add_argument(
        "--update-timeout",
        metavar="SECONDS",
        type=_update_seconds,
        help="how long to wait for the Run's worker to take and answer the request (default "
        f"{UPDATE_SECONDS:g} s); past it the command ends saying so, and the request may still "
        "be applied when a worker takes it",
    )
    parents = [connection, tenant_arguments(), actor]
    holder = argparse.ArgumentParser(add_help=False)
    holder.add_argument(
        "--held-by",
        metavar="RUN_ID",
        help="the Run that holds the item (its child Run in psych status), needed only when "
        "its id is pending in more than one Run",
    )
    answering = [*parents, holder]

    approve = commands.add_parser(
        "approve", parents=answering, help="approve a tool call a Run waits on; it runs"
    )
    approve.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
    approve.add_argument("call_id", metavar="CALL_ID", help=CALL_ID_HELP)
    approve.add_argument("--note", help="a note recorded with the decision")
    approve.set_defaults(func=lazy("psych_runtime.workers.cli._resume", "cmd_resume"))

    deny = commands.add_parser(
        "deny",
        parents=answering,
        help="reject a tool call a Run waits on; the model is told (with the note)",
    )
    deny.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
    deny.add_argument("call_id", metavar="CALL_ID", help=CALL_ID_HELP)
    deny.add_argument("--note", help="why, recorded and shown to the model")
    deny.set_defaults(func=lazy("psych_runtime.workers.cli._resume", "cmd_resume"))

    answer = commands.add_parser(
        "answer", parents=answering, help="answer the question (ask_question) a Run waits on"
    )
    answer.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
    answer.add_argument("call_id", metavar="CALL_ID", help=CALL_ID_HELP)
    answer.add_argument("text", metavar="TEXT", help="the answer the model is given")
    answer.set_defaults(func=lazy("psych_runtime.workers.cli._resume", "cmd_resume"))

    complete = commands.add_parser(
        "complete",
        parents=answering,
        help="complete an external wait; the payload becomes the waiting tool's result",
    )
    complete.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
    complete.add_argument("token", metavar="TOKEN", help="the wait's token")
    complete.add_argument(
        "--payload", metavar="JSON", help="the tool's result, as JSON (default null)"
    )
    complete.set_defaults(func=lazy("psych_runtime.workers.cli._resume", "cmd_resume"))

    abort = commands.add_parser(
        "abort", parents=parents, help="abort a Run (interruptible calls are cancelled)"
    )
    abort.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
    abort.add_argument("--reason", default="aborted by request", help="recorded with the abort")
    abort.set_defaults(func=lazy("psych_runtime.workers.cli._resume", "cmd_abort"))

    steer = commands.add_parser("steer", parents=parents, help="give a running Run a message")
    steer.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
    steer.add_argument("message", metavar="MESSAGE", help="what the model is told")
    steer.add_argument(
        "--mode",
        choices=["steer", "follow_up", "next_run"],
        default="steer",
        help="steer: into this turn's next model call (default); follow_up: held until the "
        "model would end on an answer, then a new turn instead; next_run: a new Run of the "
        "same Version when this one settles",
    )
    steer.set_defaults(func=lazy("psych_runtime.workers.cli._resume", "cmd_steer"))


def _label(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not key or not equals:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (a key, '=', its value)")
    return key, value


def _idempotency_key(text: str) -> str:
    from psych_runtime.workflows import IDEMPOTENCY_KEY_MAX

    if not 0 < len(text) <= IDEMPOTENCY_KEY_MAX:
        raise argparse.ArgumentTypeError(f"must have 1 to {IDEMPOTENCY_KEY_MAX} characters")
    return text


UPDATE_SECONDS = 10.0
"""``UPDATE_TIMEOUT``'s seconds, for the help (workflows' constant imports Temporal; a test
keeps them equal)."""


def _update_seconds(text: str) -> float:
    """``--update-timeout``: a positive, finite number of seconds. Zero is refused, not
    taken as "no bound": the client refuses it (``given_timeout``), as it does a time too
    short for a ``timedelta`` (under a microsecond, which becomes zero)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1e-6) or value > _MAX_UPDATE_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time to wait (a number of seconds, at least 0.000001 and at "
            f"most {_MAX_UPDATE_SECONDS:g})"
        )
    return value


_MAX_UPDATE_SECONDS = 10.0**9
"""The most ``--update-timeout`` takes (~31 years): ``timedelta`` and asyncio's timer take
it, where they fail on a larger one (``timedelta``'s range ends at ~2.7e12 s)."""


def _spec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="Spec file (.yaml, .yml or .json)")
    parser.add_argument(
        "--tools",
        "--registry",  # the first name it had; every other command says --tools
        dest="tools",
        help="ToolRegistry holding the code tools, as module:attribute or file.py:attribute "
        "(env PSYCH_TOOLS, as the worker reads it; --registry is the same)",
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
        # PSYCH_STORE is read by store_location, so a refusal names where the value came from.
        help=f"version store: a directory, or s3://BUCKET/PREFIX?endpoint=... a fleet shares "
        f"(env PSYCH_STORE, default {DEFAULT_STORE})",
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
    validate_cmd.set_defaults(func=lazy("psych_runtime.workers.cli._specs", "cmd_validate"))

    publish_cmd = commands.add_parser(
        "publish", parents=[store], help="validate and publish a Spec file"
    )
    _spec_arguments(publish_cmd)
    publish_cmd.set_defaults(func=lazy("psych_runtime.workers.cli._specs", "cmd_publish"))

    add_run_commands(commands, connection, store)
    add_resume_commands(commands, connection)
    add_process_commands(commands, connection)
    add_serve_command(commands, connection, store)
    add_codec_server_command(commands)
    add_fleet_commands(commands, connection)
    add_hooks_command(commands)
    add_schema_command(commands)
    add_verbose_options(parser)
    return parser


def add_schema_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``schema`` to ``psych``."""
    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of Spec files (for editors)",
        description="Print the JSON Schema (draft 2020-12) of a Spec file, an AgentSpec "
        "(kind: agent) or a WorkflowSpec (kind: workflow). Name it in a Spec file's first "
        "line as '# yaml-language-server: $schema=<file>' for completion and checking.",
    )
    schema.add_argument(
        "--output", "-o", type=Path, metavar="FILE", help="write it to FILE instead"
    )
    schema.set_defaults(func=lazy("psych_runtime.workers.cli._schema_command", "cmd_schema"))
