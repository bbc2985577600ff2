"""``psych codec-server``: decodes and encodes psych's encrypted payloads for the Temporal
Web UI and the ``temporal`` CLI, per Temporal's codec server protocol.

Protocol: ``POST /decode`` and ``POST /encode`` (also under a namespace segment,
``/<namespace>/decode``, for the CLI's ``--codec-endpoint`` templating), each taking and
answering ``{"payloads": [...]}`` in protobuf's JSON form (metadata values and data in
base64). The UI calls from the browser, so the server answers CORS preflights for the
origins it is given (and only those), allowing ``Content-Type``, ``X-Namespace`` and
``Authorization`` and credentials. Every POST must carry ``Authorization: Bearer <token>``;
a preflight carries no credentials (browsers never send them on one), so it needs none.

Tenancy: a server started with ``--tenant T`` holds only T's keys and the shared ones
(``Keyring.for_tenant``), decodes only payloads sealed for T, and encodes for T (the
protocol names no workflow, so ``/encode`` must be told its tenant). Without a tenant it
decodes for every tenant whose keys it holds and refuses ``/encode``. Payloads that are not
encrypted are returned unchanged; one it cannot open is refused (403) with the reason.

Logging (the console of ``psych``'s serving commands): where it listens and for whom at
info, and each refused request at warning with why (the status and the reason, never the
token or the payload).

The server is an asyncio socket server driven by h11 (as ``psych_runtime.testing``'s fake
model is): no web framework to install or configure for one small JSON protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import h11
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from psych_runtime.specs import AccessDenied, PsychError, SpecError
from psych_runtime.workers.cli._logging import serving_logging
from psych_runtime.workers.codec._codec import PsychCodec
from psych_runtime.workers.codec._keys import (
    EnvKeyProvider,
    FileKeyProvider,
)

MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest request body read (a UI page of history is far smaller; Temporal caps one
payload at 2 MB)."""

ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: dict[str, Any] | None = None
    logged: str | None = None
    """The reason a refusal's log line gives, when not its answer's message (which may
    quote what the request sent)."""


class CodecServer:
    """The codec server on ``host:port`` (port 0: any free one), while started.

    Args:
        codec: the keys it decodes with (``--tenant`` narrows them first).
        token: the bearer token every ``/encode`` and ``/decode`` must carry.
        origins: the browser origins allowed to call it (the Temporal UI's, e.g.
            ``http://localhost:8233``); no origin means CLI use only.
        tenant: the one tenant it serves, or None for every tenant its keys cover.
        namespace: when given, requests naming another namespace (``X-Namespace``, or
            the path's namespace segment) are refused.

    Raises:
        SpecError: an empty token, or a tenant the keys cannot encrypt for.
    """

    def __init__(
        self,
        codec: PsychCodec,
        *,
        token: str,
        origins: Sequence[str] = (),
        tenant: str | None = None,
        namespace: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not token.strip():
            raise SpecError("the codec server needs an auth token (PSYCH_CODEC_TOKEN)")
        keyring = codec.keyring if tenant is None else codec.keyring.for_tenant(tenant)
        # A viewer: history written before encryption was turned on is shown as it is.
        self.codec = PsychCodec(keyring, accept_plaintext=True)
        self.token = token.strip()
        self.origins = frozenset(origin.rstrip("/") for origin in origins)
        self.tenant = tenant
        self.namespace = namespace
        self.host, self.port = host, port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        if self._server is None:
            raise RuntimeError("the codec server is not started")
        port = self._server.sockets[0].getsockname()[1]
        return f"http://{self.host}:{port}"

    async def start(self) -> None:
        """Listen.

        Raises:
            PsychError: the address cannot be listened on (the port is in use, the host is
                not this machine's), named with the reason.
        """
        try:
            self._server = await asyncio.start_server(self._connection, self.host, self.port)
        except OSError as err:
            reason = err.strerror or str(err)
            raise PsychError(f"cannot listen on {self.host}:{self.port}: {reason}") from err

    async def close(self) -> None:
        """Stop listening and close the connections."""
        if self._server is not None:
            self._server.close()
            # Python 3.11's Server has no close_clients: idle keep-alive connections would
            # otherwise keep their handlers waiting for a next request.
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        self._writers.add(writer)
        try:
            while True:
                received = await _read(conn, reader)
                if received is None:
                    break
                request, body = received
                origin, answer = self._answer(request, body)
                if answer.status >= 400:
                    _log_refusal(request, answer)
                await _send(conn, writer, answer, self._cors(origin, request.method == b"OPTIONS"))
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except _TooLarge:
            _log.warning(
                "codec server refused a request: its body is over %d bytes (413)", MAX_BODY_BYTES
            )
            with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
                await _send(conn, writer, _Answer(413, _error("request body too large")), [])
        except (ConnectionError, h11.ProtocolError):
            pass  # the client went away or spoke something else; nothing to answer
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _cors(self, origin: str | None, preflight: bool) -> list[tuple[bytes, bytes]]:
        if origin is None or origin.rstrip("/") not in self.origins:
            return []
        headers = [
            (b"access-control-allow-origin", origin.encode()),
            (b"access-control-allow-credentials", b"true"),
            (b"vary", b"Origin"),
        ]
        if preflight:
            headers += [
                (b"access-control-allow-methods", b"POST, OPTIONS"),
                (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                (b"access-control-max-age", b"600"),
            ]
        return headers

    def _answer(self, request: h11.Request, body: bytes) -> tuple[str | None, _Answer]:
        # Header bytes are Latin-1 by HTTP's definition: decoding them never fails.
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in request.headers
        }
        origin = headers.get("origin")
        path = request.target.decode("latin-1").split("?", 1)[0].rstrip("/")
        segments = path.split("/")[1:]
        if not 1 <= len(segments) <= 2 or segments[-1] not in ("encode", "decode"):
            return origin, _Answer(404, _error(f"no such endpoint {path!r}"))
        action = segments[-1]
        if request.method == b"OPTIONS":
            if origin is None or origin.rstrip("/") not in self.origins:
                return origin, _Answer(403, _error(f"origin {origin!r} is not allowed"))
            return origin, _Answer(204)
        if request.method != b"POST":
            return origin, _Answer(405, _error("POST only"))
        if not hmac.compare_digest(
            headers.get("authorization", "").encode(), f"Bearer {self.token}".encode()
        ):
            return origin, _Answer(401, _error("missing or wrong 'Authorization: Bearer' token"))
        named = {headers.get("x-namespace"), segments[0] if len(segments) == 2 else None}
        if self.namespace is not None and named - {None, self.namespace}:
            return origin, _Answer(403, _error(f"this codec server serves {self.namespace!r}"))
        try:
            payloads = json_format.Parse(body or b"{}", Payloads())
        except (json_format.ParseError, ValueError) as err:  # ValueError: not UTF-8
            return origin, _Answer(
                400,
                _error(f'not {{"payloads": [...]}}: {err}'),
                'the body is not {"payloads": [...]}',
            )
        try:
            if action == "decode":
                opened = [self.codec.open(p, self.tenant) for p in payloads.payloads]
                out = Payloads(payloads=opened)
            elif self.tenant is None:
                return origin, _Answer(
                    400, _error("this codec server serves no one tenant; start it with --tenant")
                )
            else:
                out = Payloads(payloads=self.codec.seal_for(self.tenant, payloads.payloads))
        except AccessDenied as err:
            return origin, _Answer(403, _error(str(err)))
        return origin, _Answer(200, json_format.MessageToDict(out))


def _error(message: str) -> dict[str, Any]:
    return {"message": message}


def _log_refusal(request: h11.Request, answer: _Answer) -> None:
    """The warning for a refused request: its method, path and why (never its token, its
    body, or a reason quoting the body)."""
    reason = answer.logged or (answer.body or {}).get("message", "")
    target = request.target.decode("latin-1").split("?", 1)[0]
    _log.warning(
        "codec server refused %s %r (%d): %s",
        request.method.decode("latin-1"),
        target,
        answer.status,
        reason,
    )


class _TooLarge(Exception):
    pass


async def _read(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request, bytes] | None:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise _TooLarge
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None  # h11 yields a Request before its EndOfMessage
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:
            raise h11.LocalProtocolError(f"unexpected event {event!r}")


async def _send(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    answer: _Answer,
    extra: list[tuple[bytes, bytes]],
) -> None:
    events: list[h11.Event]
    if answer.body is None:  # 204: no body, and no Content-Length (RFC 9110, 8.6)
        events = [h11.Response(status_code=answer.status, headers=extra), h11.EndOfMessage()]
    else:
        payload = json.dumps(answer.body).encode()
        headers = [
            *extra,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        events = [
            h11.Response(status_code=answer.status, headers=headers),
            h11.Data(data=payload),
            h11.EndOfMessage(),
        ]
    for event in events:
        data = conn.send(event)
        if data:
            writer.write(data)
    await writer.drain()


def cmd_codec_server(args: argparse.Namespace) -> int:
    """``psych codec-server``: serve until SIGINT or SIGTERM."""
    serving_logging(verbose=args.verbose, quiet=args.quiet)
    keyring = (
        FileKeyProvider(Path(args.keys)).keyring()
        if args.keys
        else EnvKeyProvider(os.environ).keyring()
    )
    if args.token_file:
        try:
            token = Path(args.token_file).read_text()
        except OSError as err:
            raise SpecError(f"cannot read --token-file {args.token_file!r}: {err}") from err
    else:
        token = os.environ.get("PSYCH_CODEC_TOKEN", "")
    server = CodecServer(
        PsychCodec(keyring),
        token=token,
        origins=args.origin,
        tenant=args.tenant,
        namespace=args.namespace,
        host=args.host,
        port=args.port,
    )
    return asyncio.run(_serve(server))


async def _serve(server: CodecServer) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        origins = ", ".join(sorted(server.origins)) or "none (CLI only)"
        _log.info(
            "codec server at %s (tenant: %s; browser origins: %s; namespace: %s); Ctrl-C to stop",
            server.url,
            server.tenant
            or f"every tenant of its keys: {', '.join(sorted(server.codec.keyring.tenants))}",
            origins,
            server.namespace or "any",
        )
        await stop.wait()
    return 0
