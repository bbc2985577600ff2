"""``psych serve``: the HTTP API (``psych_runtime.workers.serve``) under uvicorn.

Who may call comes from the global settings file's ``serve:`` section (API keys by their
SHA-256, a JWT issuer), overridden by flags and ``PSYCH_SERVE_*`` variables; where push
notifications may go, from its ``egress:`` section and ``PSYCH_EGRESS_*``; the Temporal
connection is ``psych run``'s, the version store ``--store``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from psych_runtime.activities.blobs import blob_store_from_env
from psych_runtime.activities.egress import EgressSettings
from psych_runtime.activities.tokens import token_store_from_env
from psych_runtime.activities.versions import version_store_at
from psych_runtime.specs import PsychError, TenantPermits, load_yaml
from psych_runtime.workers._settings import global_settings_path, worker_egress
from psych_runtime.workers._settings_file import default_global_settings
from psych_runtime.workers._worker import DEFAULT_HOME
from psych_runtime.workers._worker_checks import tenant_sealed_blobs, tenant_sealed_tokens
from psych_runtime.workers._worker_settings import permits_with_file
from psych_runtime.workers.cli._logging import serving_logging, uvicorn_options
from psych_runtime.workers.cli._parser import store_location
from psych_runtime.workers.cli._parser_serving import DEFAULT_LISTEN
from psych_runtime.workers.cli._runs import roles_apart_of, temporal_client
from psych_runtime.workers.cli._specs import load_registry
from psych_runtime.workers.cli._stores import close_stores
from psych_runtime.workers.serve import (
    DEFAULT_MAX_BODY_BYTES,
    AuthSettings,
    JwtSettings,
    ServeSection,
    ServeSettings,
    api_keys_from,
    create_app,
    parse_serve_section,
)
from psych_runtime.workflows import PsychClient

if TYPE_CHECKING:
    from temporalio.client import Client

_log = logging.getLogger(__name__)


def parse_listen(text: str, source: str = "--listen") -> tuple[str, int]:
    """``host:port`` (``[::1]:8000`` for IPv6) as a host and a port; ``source`` is where
    ``text`` was given, for the message.

    Raises:
        PsychError: not of that shape, or the port is not 0-65535.
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise PsychError(f"{source} {text!r}: give host:port, such as 127.0.0.1:8000")
    return host, int(port)


def listen_of(args: argparse.Namespace, variable: str, default: str) -> str:
    """``--listen``, else the environment ``variable``, else ``default``; checked, so a bad
    one names where it was given.

    Raises:
        PsychError: it is not host:port.
    """
    if args.listen is not None:
        parse_listen(args.listen, "--listen")
        return str(args.listen)
    listen = os.environ.get(variable) or default
    parse_listen(listen, variable)
    return listen


def _settings_file_named(args: argparse.Namespace) -> str:
    """The global settings file serve reads, and where it was named."""
    if args.settings is not None:
        return f"{args.settings}, from --settings"
    if os.environ.get("PSYCH_SETTINGS"):
        return f"{os.environ['PSYCH_SETTINGS']}, from PSYCH_SETTINGS"
    return str(default_global_settings())


def _section(args: argparse.Namespace) -> ServeSection:
    path = global_settings_path(args.settings)
    if path is None:
        return ServeSection()
    try:
        document = path.read_bytes()
    except OSError as err:
        raise PsychError(f"{path}: cannot read the settings file: {err.strerror}") from err
    data = load_yaml(document, source=str(path))
    serve = data.get("serve") if isinstance(data, dict) else None
    return parse_serve_section(serve, str(path))


def egress_from(args: argparse.Namespace) -> EgressSettings:
    """Where the app's own requests (A2A push notifications) may connect: the
    environment's rules (``PSYCH_EGRESS_*``) and the ``egress:`` section of the settings
    file ``serve`` reads (``--settings``, else ``PSYCH_SETTINGS`` or the default one), as a
    worker given that file judges a Spec's URLs.

    Raises:
        PsychError: a malformed rule (named).
    """
    try:
        return worker_egress(EgressSettings.from_env(), args.settings)
    except ValueError as err:  # SpecError is one: the file's problems, named
        raise PsychError(str(err)) from err


def permits_from(args: argparse.Namespace) -> TenantPermits | None:
    """What each tenant may use (a Run whose Spec uses more is refused): the ``permits:``
    section of the settings file ``serve`` reads, as the workers given that file apply it.

    Raises:
        PsychError: a problem of the settings file (named).
    """
    try:
        return permits_with_file(None, args.settings)
    except ValueError as err:  # SpecError is one: the file's problems, named
        raise PsychError(str(err)) from err


def auth_from(args: argparse.Namespace, section: ServeSection) -> AuthSettings:
    """The credentials accepted: the settings file's, with flags and env over them.

    Raises:
        PsychError: a malformed ``PSYCH_SERVE_API_KEYS``, an incomplete JWT setting, or
            none at all.
    """
    keys = section.auth.api_keys
    raw = os.environ.get("PSYCH_SERVE_API_KEYS")
    if raw:
        try:
            keys = keys + api_keys_from(json.loads(raw), "PSYCH_SERVE_API_KEYS")
        except (ValueError, TypeError) as err:
            raise PsychError(
                f"{err} (PSYCH_SERVE_API_KEYS is a JSON list of "
                "{sha256, tenant, principal, publisher})"
            ) from err
    jwt = section.auth.jwt
    flags = {
        "jwks_url": args.jwks_url,
        "issuer": args.jwt_issuer,
        "audience": args.jwt_audience,
        "tenant_claim": args.jwt_tenant_claim,
        "principal_claim": args.jwt_principal_claim,
        "publisher_claim": args.jwt_publisher_claim,
        "algorithms": tuple(args.jwt_algorithm) if args.jwt_algorithm else None,
    }
    given = {name: value for name, value in flags.items() if value}
    if given:
        try:  # the file's settings, each flag given over its own
            jwt = JwtSettings(**given) if jwt is None else dataclasses.replace(jwt, **given)
        except TypeError as err:
            raise PsychError(
                "JWT verification needs --jwks-url, --jwt-issuer and --jwt-audience "
                "(or jwt: in the settings file's serve: section)"
            ) from err
        except ValueError as err:
            raise PsychError(str(err)) from err
    auth = AuthSettings(keys, jwt)
    if not auth.configured:
        raise PsychError(
            "psych serve accepts nobody yet: configure api_keys or jwt in the serve: section "
            f"of the settings file ({_settings_file_named(args)}), "
            "PSYCH_SERVE_API_KEYS, or --jwks-url/--jwt-issuer/--jwt-audience"
        )
    return auth


async def _serve(args: argparse.Namespace) -> int:
    listen = listen_of(args, "PSYCH_SERVE_LISTEN", DEFAULT_LISTEN)
    host, port = parse_listen(listen)
    settings = await serve_settings(args)
    app = create_app(settings)
    config = uvicorn.Config(app, host=host, port=port, **uvicorn_options(args.verbose))
    server = AnnouncedServer(
        config, functools.partial(_log.info, "psych serve: http://%s (Ctrl-C to stop)", listen)
    )
    # Its shutdown (the app's lifespan) closes the push registry, its tasks' push
    # notifications left for the next process to take over, then the stores opened here.
    await server.serve()
    return 0


class AnnouncedServer(uvicorn.Server):
    """A serving command's uvicorn server that calls ``announce`` (its "Ctrl-C to stop"
    line) once it listens: a line logged before the bind sent callers to a port not yet
    open, and was logged by a server whose port was taken too, just before it exited."""

    def __init__(self, config: uvicorn.Config, announce: Callable[[], None]) -> None:
        super().__init__(config)
        self._announce = announce
        self._interrupted = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._announce()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT:
            self._interrupted = True
        super().handle_exit(sig, frame)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve until SIGINT or SIGTERM; once shut down, a SIGINT ends the command as
        interrupted (``KeyboardInterrupt``: "psych: interrupted", exit 130).

        uvicorn raises the SIGINT again once it has shut down, which does that only where
        SIGINT was not ignored when the process started: a non-interactive shell's
        background job (``psych serve &`` in a script) inherits it ignored, uvicorn still
        stops on it, and the raise did nothing, so the command returned 0.
        """
        await super().serve(sockets)
        if self._interrupted:
            raise KeyboardInterrupt


async def serve_settings(
    args: argparse.Namespace,
    connect: Callable[[argparse.Namespace], Awaitable[Client]] = temporal_client,
) -> ServeSettings:
    """What ``psych serve`` builds its app from: its flags, its settings file's sections and
    the environment's stores, with the Temporal client ``connect`` makes once they are
    checked (nothing is connected to for settings that are refused). The blob and token
    stores that hold connections (S3's) are closed by the app's shutdown (``at_shutdown``),
    and so is an S3 version store.

    Raises:
        PsychError: a setting is wrong (names which), or no credential is accepted.
        SpecError: a store's location is malformed.
    """
    roles_apart = roles_apart_of(args)
    where, source = store_location(args)
    store = version_store_at(where, source=source)
    section = _section(args)
    auth = auth_from(args, section)
    egress = egress_from(args)
    permits = permits_from(args)
    registry = load_registry(args)
    # The workers' blob store (PSYCH_BLOB_DIR, PSYCH_BLOB_URL, or .psych/blobs), for a
    # report with its model calls' inputs; opened for the caller's tenant when sealed.
    blobs = blob_store_from_env(os.environ, Path(DEFAULT_HOME) / "blobs", writes=False)
    # The workers' token store (PSYCH_TOKEN_DIR, the fleet's bucket, or .psych/tokens): as
    # it is for the OAuth callback (which reads and writes nothing sealed); for A2A push
    # records sealed for each record's tenant as the workers seal theirs in a Run (they
    # hold callers' webhook credentials, and peers' push tokens). Both are built (their
    # settings checked, nothing opened) before Temporal is connected to.
    tokens = token_store_from_env(os.environ, Path(DEFAULT_HOME) / "tokens")
    temporal = await connect(args)
    client = PsychClient(
        temporal,
        store=store,
        task_queue=args.task_queue,
        registry=registry,
        roles_apart=roles_apart,
        permits=permits,
        blobs=tenant_sealed_blobs(temporal, blobs),
    )
    return ServeSettings(
        client=client,
        auth=auth,
        tokens=tokens,
        max_body_bytes=args.max_body_bytes or section.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        push_tokens=tenant_sealed_tokens(temporal, tokens),
        egress=egress,
        # The S3 stores' clients and connection pools (the Versions' too): nothing else
        # closes them.
        at_shutdown=(functools.partial(close_stores, blobs, tokens, store),),
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the HTTP API until SIGINT/SIGTERM."""
    serving_logging(verbose=args.verbose, quiet=args.quiet)
    return asyncio.run(_serve(args))
