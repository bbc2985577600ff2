"""``psych oauth-callback``: the OAuth redirect of MCP servers a person consents to, served
under uvicorn (``workers/_oauth_callback.py``), with the workers' token store and Temporal
connection (``psych run``'s)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
from pathlib import Path

import uvicorn

from psych_runtime.activities.tokens import token_store_from_env
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.workers._oauth_callback import CALLBACK_PATH, oauth_callback_app
from psych_runtime.workers._worker import DEFAULT_HOME
from psych_runtime.workers.cli._logging import serving_logging, uvicorn_options
from psych_runtime.workers.cli._parser_serving import DEFAULT_CALLBACK_LISTEN
from psych_runtime.workers.cli._runs import temporal_client
from psych_runtime.workers.cli._serve_command import AnnouncedServer, listen_of, parse_listen
from psych_runtime.workers.cli._stores import closing_stores
from psych_runtime.workflows import PsychClient

_log = logging.getLogger(__name__)


async def _serve(args: argparse.Namespace) -> int:
    listen = listen_of(args, "PSYCH_OAUTH_CALLBACK_LISTEN", DEFAULT_CALLBACK_LISTEN)
    host, port = parse_listen(listen)
    store = token_store_from_env(os.environ, Path(DEFAULT_HOME) / "tokens")
    temporal = await temporal_client(args)
    # Only resumes go through this client: no Spec is published or read.
    client = PsychClient(temporal, store=FileVersionStore(Path(DEFAULT_HOME) / "versions"))
    app = oauth_callback_app(client, store)
    config = uvicorn.Config(app, host=host, port=port, **uvicorn_options(args.verbose))
    server = AnnouncedServer(
        config,
        functools.partial(
            _log.info, "psych oauth-callback: http://%s%s (Ctrl-C to stop)", listen, CALLBACK_PATH
        ),
    )
    # The token store's S3 client and connections (PSYCH_BLOB_URL): closed however the
    # server stops (on SIGINT, AnnouncedServer.serve raises KeyboardInterrupt once shut down).
    async with closing_stores(store):
        await server.serve()
    return 0


def cmd_oauth_callback(args: argparse.Namespace) -> int:
    """Serve the OAuth callback until SIGINT/SIGTERM."""
    serving_logging(verbose=args.verbose, quiet=args.quiet)
    return asyncio.run(_serve(args))
