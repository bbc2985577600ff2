"""The arguments of ``psych``'s serving and fleet commands (``worker``, ``dev``, ``serve``,
``codec-server``, ``replay``, ``deploy promote``, ``hooks check``); see ``_parser``.

Defaults that live in modules this parser must not import (they import Temporal or
cryptography) are repeated here; a test keeps each equal to its source.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from psych_runtime.workers.cli._lazy import lazy
from psych_runtime.workers.cli._logging import add_serving_log_options

WORKFLOW_TYPES = ("AgentRun", "WorkflowRun")
"""``fleet.WORKFLOW_TYPES``: the workflow types ``psych replay`` replays."""
ENV_KEYS = "PSYCH_CODEC_KEYS"
"""``codec.ENV_KEYS``."""
ENV_KEY_FILE = "PSYCH_CODEC_KEY_FILE"
"""``codec.ENV_KEY_FILE``."""
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""``serve``'s default largest request body."""


SCRIPTED_SUPPORT = ""
"""``--fake-model`` given without a file: the scripted support model (no file has no name)."""


def add_process_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """Add ``worker`` and ``dev`` to ``psych``."""
    wiring = argparse.ArgumentParser(add_help=False)
    wiring.add_argument(
        "--tools",
        "--registry",  # validate's and publish's old name, accepted everywhere
        dest="tools",
        help="ToolRegistry of the code tools, module:attribute or file.py:attribute "
        "(overrides PSYCH_TOOLS; --registry is the same)",
    )
    wiring.add_argument(
        "--fake-model",
        nargs="?",
        const=SCRIPTED_SUPPORT,
        metavar="SCRIPT",
        help="serve the models from a fake model on loopback instead of OPENAI_BASE_URL: "
        "alone, the scripted support model the demo uses; with SCRIPT, a .json/.yaml file "
        "of replies answered in order (see workers/README.md)",
    )
    add_serving_log_options(
        wiring, "log tracebacks and the SDK's debug records (default: one line per failure)"
    )
    wiring.add_argument(
        "--task-queue", help="the task queue to poll (overrides PSYCH_TASK_QUEUE, default psych)"
    )
    wiring.add_argument(
        "--ask",
        action="append",
        metavar="TOOL_PATTERN",
        help="a person must approve each call of this tool before it runs: a name, or a "
        "prefix ending in '*' (repeatable; replaces PSYCH_ASK, comma-separated patterns)",
    )
    add_settings_arguments(wiring)
    wiring.add_argument(
        "--live-listen",
        metavar="HOST:PORT",
        help="where the model calls' deltas are served to followers (env PSYCH_LIVE_LISTEN; "
        "default 127.0.0.1:0, loopback on any free port; 'off': none)",
    )
    wiring.add_argument(
        "--live-url",
        metavar="URL",
        help="the base URL followers on other machines reach --live-listen at, e.g. "
        "http://10.0.0.5:7280 (env PSYCH_LIVE_URL; default derived from --live-listen)",
    )
    wiring.add_argument(
        "--ask-destructive",
        action="store_true",
        help="a person must approve each call of a tool registered destructive=True, or "
        "an MCP tool annotated destructiveHint and not readOnlyHint "
        "(env PSYCH_ASK_DESTRUCTIVE=1)",
    )

    worker = commands.add_parser(
        "worker",
        parents=[connection, wiring],
        help="run a worker against a Temporal server",
        description="Run a psych worker until SIGINT/SIGTERM. The server comes from "
        "TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS* (or --address/"
        "--namespace); the wiring from PSYCH_TOOLS, PSYCH_TASK_QUEUE, PSYCH_BLOB_URL or "
        "PSYCH_BLOB_DIR, "
        "OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_STREAM; which tool calls wait for a "
        "person's approval from PSYCH_ASK and PSYCH_ASK_DESTRUCTIVE (or --ask/--ask-destructive).",
    )
    worker.add_argument(
        "--role",
        action="append",
        choices=["workflows", "model", "tools", "all"],
        help="what this worker runs, each role on its own task queue: workflows on the base "
        "queue, model calls on <base>-model, tools on <base>-tools (repeatable; replaces "
        "PSYCH_ROLES, comma-separated; default all)",
    )
    worker.add_argument(
        "--max-workflow-tasks",
        type=int,
        help="workflow tasks at once, workflows role (env PSYCH_MAX_WORKFLOW_TASKS, default 100)",
    )
    worker.add_argument(
        "--max-model-calls",
        type=int,
        help="model calls at once, model role (env PSYCH_MAX_MODEL_CALLS, default 100)",
    )
    worker.add_argument(
        "--max-tool-calls",
        type=int,
        help="tool calls at once, tools role (env PSYCH_MAX_TOOL_CALLS, default 100)",
    )
    worker.add_argument(
        "--deployment",
        help="Worker Versioning: the Worker Deployment this worker belongs to (env "
        "PSYCH_DEPLOYMENT; with --build-id; default unversioned)",
    )
    worker.add_argument(
        "--build-id", help="Worker Versioning: this worker's build (env PSYCH_BUILD_ID)"
    )
    worker.add_argument(
        "--health-port",
        type=port_number,
        help="serve /livez and /readyz on this port (env PSYCH_HEALTH_PORT; default off)",
    )
    worker.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve the SDK's Prometheus metrics at /metrics on this port "
        "(env PSYCH_METRICS_PORT; default off)",
    )
    worker.set_defaults(func=lazy("psych_runtime.workers.cli._processes", "cmd_worker"))

    dev = commands.add_parser(
        "dev",
        parents=[wiring],
        help="run a local Temporal dev server and a worker",
        description="Start the embedded Temporal dev server and a worker in this process; "
        "stop both on SIGINT/SIGTERM.",
    )
    dev.add_argument(
        "--port", type=port_number, default=7233, help="the server's port (default 7233)"
    )
    dev.add_argument("--ui", action="store_true", help="also serve the Temporal web UI")
    dev.add_argument("--ui-port", type=port_number, help="the UI's port (default: --port + 1000)")
    dev.add_argument("--db", metavar="FILE", help="keep the server's state in this SQLite file")
    dev.set_defaults(func=lazy("psych_runtime.workers.cli._processes", "cmd_dev"))


DEFAULT_LISTEN = "127.0.0.1:8000"
DEFAULT_CALLBACK_LISTEN = "127.0.0.1:8765"


def add_serve_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
    store: argparse.ArgumentParser,
) -> None:
    """Add ``serve`` to ``psych``."""
    env = os.environ.get
    serve = commands.add_parser(
        "serve", parents=[connection, store], help="serve the HTTP API (REST, SSE, OpenAPI)"
    )
    serve.add_argument(
        "--listen",  # default: PSYCH_SERVE_LISTEN, else DEFAULT_LISTEN (listen_of)
        metavar="HOST:PORT",
        help=f"where to listen (env PSYCH_SERVE_LISTEN, default {DEFAULT_LISTEN})",
    )
    serve.add_argument(
        "--settings",
        type=Path,
        metavar="FILE",
        help="the global settings file whose serve: section configures API keys and JWTs, "
        "and whose egress: section where A2A push notifications may go "
        f"(overrides PSYCH_SETTINGS; default {_GLOBAL_SETTINGS} when it exists)",
    )
    serve.add_argument(
        "--tools",
        "--registry",  # validate's and publish's old name, accepted everywhere
        dest="tools",
        help="ToolRegistry of the code tools Specs may name, module:attribute or "
        "file.py:attribute (env PSYCH_TOOLS; --registry is the same)",
    )
    serve.add_argument(
        "--task-queue",
        default=env("PSYCH_TASK_QUEUE", "psych"),
        help="the task queue workers poll (env PSYCH_TASK_QUEUE, default psych)",
    )
    serve.add_argument(
        "--roles-apart",
        action="store_true",  # PSYCH_ROLES_APART: read when serve runs, as for run
        help="the fleet runs worker roles apart (env PSYCH_ROLES_APART=1), as for psych run",
    )
    serve.add_argument(
        "--max-body-bytes",
        # Read when `serve` runs, as argparse converts a string default then: a bad
        # PSYCH_SERVE_MAX_BODY_BYTES is a usage error of `serve`, not of every command.
        type=_byte_count,
        default=env("PSYCH_SERVE_MAX_BODY_BYTES") or None,
        help=f"largest request body (env PSYCH_SERVE_MAX_BODY_BYTES; default "
        f"{DEFAULT_MAX_BODY_BYTES})",
    )
    jwt = serve.add_argument_group("JWT verification (over the settings file's serve.jwt)")
    jwt.add_argument(
        "--jwks-url",
        default=env("PSYCH_SERVE_JWKS_URL"),
        help="the JWKS URL (env PSYCH_SERVE_JWKS_URL)",
    )
    jwt.add_argument(
        "--jwt-issuer",
        default=env("PSYCH_SERVE_JWT_ISSUER"),
        help="required iss (env PSYCH_SERVE_JWT_ISSUER)",
    )
    jwt.add_argument(
        "--jwt-audience",
        default=env("PSYCH_SERVE_JWT_AUDIENCE"),
        help="required aud (env PSYCH_SERVE_JWT_AUDIENCE)",
    )
    jwt.add_argument(
        "--jwt-tenant-claim",
        default=env("PSYCH_SERVE_JWT_TENANT_CLAIM"),
        help="the claim holding the tenant (env PSYCH_SERVE_JWT_TENANT_CLAIM, default tenant)",
    )
    jwt.add_argument(
        "--jwt-principal-claim",
        default=env("PSYCH_SERVE_JWT_PRINCIPAL_CLAIM"),
        help="the claim holding the principal (env PSYCH_SERVE_JWT_PRINCIPAL_CLAIM, default sub)",
    )
    jwt.add_argument(
        "--jwt-publisher-claim",
        default=env("PSYCH_SERVE_JWT_PUBLISHER_CLAIM"),
        help="a claim that is true in the tokens of callers who may publish Versions "
        "(env PSYCH_SERVE_JWT_PUBLISHER_CLAIM; default: no token's caller may)",
    )
    jwt.add_argument(
        "--jwt-algorithm",
        action="append",
        help="an accepted signature algorithm (repeatable; default RS256 and ES256)",
    )
    add_serving_log_options(serve)
    serve.set_defaults(func=lazy("psych_runtime.workers.cli._serve_command", "cmd_serve"))
    callback = commands.add_parser(
        "oauth-callback",
        parents=[connection],
        help="serve the OAuth redirect of MCP servers a person consents to",
        description="Serve GET /oauth/callback: the redirect of an MCP server's "
        "authorization_code grant. It finds the Run waiting on the redirect's state in the "
        "workers' token store (PSYCH_TOKEN_DIR, or PSYCH_BLOB_URL's bucket), leaves the code "
        "there and resumes the Run. Point the Spec's oauth.redirect_uris at it.",
    )
    callback.add_argument(
        "--listen",  # default: PSYCH_OAUTH_CALLBACK_LISTEN, else DEFAULT_CALLBACK_LISTEN
        metavar="HOST:PORT",
        help="where to listen (env PSYCH_OAUTH_CALLBACK_LISTEN, default "
        f"{DEFAULT_CALLBACK_LISTEN})",
    )
    add_serving_log_options(callback)
    callback.set_defaults(
        func=lazy("psych_runtime.workers.cli._oauth_callback_command", "cmd_oauth_callback")
    )


def add_fleet_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """Add ``replay`` and ``deploy promote`` to ``psych``."""
    replay_cmd = commands.add_parser(
        "replay",
        parents=[connection],
        help="replay Run histories against the installed workflow code",
        description="Replay histories (JSON files as `temporal workflow show --output json` "
        "writes them, directories of them, and/or the newest Runs of a namespace with --last) "
        "against the installed AgentRun and WorkflowRun. Prints one line per Run; exits 1 "
        "when any no longer replays, naming the Run and the event.",
    )
    replay_cmd.add_argument("histories", nargs="*", help="history .json files or directories")
    replay_cmd.add_argument(
        "--last",
        type=_run_count,
        metavar="N",
        help="also replay the newest N Runs of each workflow type from the server",
    )
    replay_cmd.add_argument(
        "--type",
        action="append",
        choices=WORKFLOW_TYPES,
        help="with --last, only this workflow type (repeatable; default both)",
    )
    replay_cmd.set_defaults(func=lazy("psych_runtime.workers.cli._fleet", "cmd_replay"))

    deploy = commands.add_parser("deploy", help="Worker Versioning: roll out a build")
    actions = deploy.add_subparsers(dest="action", required=True)
    promote_cmd = actions.add_parser(
        "promote",
        parents=[connection],
        help="make a build the current version of its Worker Deployment",
        description="New Runs start on the promoted build; Runs pinned to an older build "
        "finish on it, so keep its workers until they drain.",
    )
    promote_cmd.add_argument("--deployment", help="the deployment name (env PSYCH_DEPLOYMENT)")
    promote_cmd.add_argument("--build-id", help="the build to promote (env PSYCH_BUILD_ID)")
    promote_cmd.set_defaults(func=lazy("psych_runtime.workers.cli._fleet", "cmd_promote"))


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """``--settings FILE`` and ``--trust-project-settings``, for worker, dev and hooks."""
    parser.add_argument(
        "--settings",
        type=Path,
        metavar="FILE",
        help="the global settings file (tool-call hooks, trusted modules; overrides "
        f"PSYCH_SETTINGS; default {_GLOBAL_SETTINGS} when it exists)",
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
    check.set_defaults(func=lazy("psych_runtime.workers.cli._hooks", "cmd_hooks_check"))


def add_codec_server_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register ``psych codec-server``."""
    cmd = commands.add_parser(
        "codec-server",
        help="decode and encode encrypted payloads for the Temporal UI and CLI",
        description=(
            "Serve Temporal's codec server protocol (POST /decode, /encode) with psych's keys "
            f"({ENV_KEYS} or {ENV_KEY_FILE}, or --keys). Every request must carry "
            "'Authorization: Bearer <token>', the token from PSYCH_CODEC_TOKEN or --token-file."
        ),
    )
    cmd.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    cmd.add_argument(
        "--port", type=listen_port, default=8888, help="port to listen on (8888; 0: any free)"
    )
    cmd.add_argument(
        "--origin",
        action="append",
        default=[],
        help="a browser origin allowed to call it, the Temporal UI's (repeatable), "
        "e.g. http://localhost:8233",
    )
    cmd.add_argument(
        "--tenant", help="serve only this tenant: its keys and the shared ones; needed for /encode"
    )
    cmd.add_argument(
        "--namespace", help="refuse requests naming another namespace (X-Namespace or the path)"
    )
    cmd.add_argument("--keys", help=f"keyring JSON file (default: {ENV_KEYS} or {ENV_KEY_FILE})")
    cmd.add_argument("--token-file", help="file holding the token (default: PSYCH_CODEC_TOKEN)")
    add_serving_log_options(cmd)
    cmd.set_defaults(func=lazy("psych_runtime.workers.codec", "cmd_codec_server"))


_GLOBAL_SETTINGS = "$XDG_CONFIG_HOME/psych/settings.yaml (~/.config/psych/settings.yaml)"
"""Where ``default_global_settings`` looks, as help says it (not this machine's path)."""


def port_number(text: str) -> int:
    """A port flag's value: a whole number from 1 to 65535 (argparse names the flag)."""
    value = listen_port(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)")
    return value


def listen_port(text: str) -> int:
    """A port to listen on: 1 to 65535, or 0 for any free one (the server prints it)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port number (1 to 65535, or 0 for any free port)"
        )
    return value


def _run_count(text: str) -> int:
    """``replay --last N``: a whole number >= 1 (0 or less replayed nothing and passed)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of Runs (a whole number >= 1)")
    return value


def _byte_count(text: str) -> int:
    """A ``--max-body-bytes`` (or ``PSYCH_SERVE_MAX_BODY_BYTES``): a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a byte count (a whole number >= 1; also read from "
            "PSYCH_SERVE_MAX_BODY_BYTES)"
        )
    return value
