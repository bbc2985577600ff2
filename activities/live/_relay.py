"""The relay: a small HTTP/1.1 server in the worker process serving its hub's attempts.

``GET /deltas/<token>?after=N`` answers ``application/x-ndjson``: the attempt's pieces from
``N + 1`` as they are published, then its end line, then the response ends. An unknown (or
forgotten) token is 404, anything else 400/404/405 with a one-line reason. Served over h11
(already a dependency, through httpx) on the worker's event loop, where the model
activities publish: a piece is on the wire one loop iteration after it was read from the
provider. The token in the path is the only credential: unguessable, per attempt, and
known only to whoever can describe the Run's workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs, urlsplit

import h11

from psych_runtime.activities.live._hub import AttemptDeltas, DeltaHub

_MAX_READ = 65536
_PREFIX = "/deltas/"


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) as a host and port; port 0 = any free one.

    Raises:
        ValueError: naming what is wrong with ``listen``.
    """
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"a live relay address must be host:port, got {listen!r}")
    return host, int(port)


class DeltaRelay:
    """Serves ``hub`` over HTTP while running (``async with``).

    Args:
        hub: the attempts to serve; ``hub.base_url`` is set to ``url`` when started.
        listen: ``host:port`` to listen on (default loopback, any free port).
        url: the base URL followers reach it at (a fleet's advertised address); None:
            ``http://<listen host>:<bound port>``.
    """

    def __init__(self, hub: DeltaHub, *, listen: str = "127.0.0.1:0", url: str | None = None):
        self.hub = hub
        self.host, self.port = parse_listen(listen)
        self.advertised = url
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        if self.advertised is not None:
            return self.advertised.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.hub.base_url = self.url

    async def stop(self) -> None:
        """Stop listening and cut open streams (their followers see no end marker)."""
        self.hub.base_url = None
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
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
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = h11.Connection(h11.SERVER)
        try:
            with contextlib.suppress(ConnectionError, h11.ProtocolError):
                while True:
                    request = await _read_request(conn, reader)
                    if request is None:
                        return
                    await self._answer(conn, writer, request)
                    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request
    ) -> None:
        async def write(event: h11.Event) -> None:
            data = conn.send(event)
            if data:
                writer.write(data)
                await writer.drain()

        try:
            attempt, after = self._route(request)
        except _Refused as err:
            body = json.dumps({"error": str(err)}).encode() + b"\n"
            headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
            await write(h11.Response(status_code=err.status, headers=headers))
            await write(h11.Data(data=body))
            await write(h11.EndOfMessage())
            return
        headers = [("content-type", "application/x-ndjson"), ("cache-control", "no-store")]
        await write(h11.Response(status_code=200, headers=headers))
        async for line in attempt.read(after):
            await write(h11.Data(data=line))
        await write(h11.EndOfMessage())

    def _route(self, request: h11.Request) -> tuple[AttemptDeltas, int]:
        if request.method != b"GET":
            raise _Refused(405, f"only GET is served, not {request.method.decode()}")
        parts = urlsplit(request.target.decode("ascii", errors="replace"))
        if not parts.path.startswith(_PREFIX):
            raise _Refused(404, f"no such path {parts.path!r}; deltas are at /deltas/<token>")
        attempt = self.hub.get(parts.path.removeprefix(_PREFIX))
        if attempt is None:
            raise _Refused(404, "no such attempt (unknown token, or ended and forgotten)")
        values = parse_qs(parts.query).get("after", ["0"])
        # ASCII digits only (str.isdigit takes "²", which int refuses), and few enough
        # that int() reads them (it refuses over 4,300 digits).
        if len(values) != 1 or not _WHOLE.fullmatch(values[0]):
            shown = repr(values)[:80]
            raise _Refused(400, f"after must be one whole number >= 0, got {shown}")
        return attempt, int(values[0])


_WHOLE = re.compile(r"[0-9]{1,18}")
"""An ``after``: a count of lines, which an int64 holds."""


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """A request's head (a GET has no body to wait for); None when the client closed."""
    request: h11.Request | None = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(_MAX_READ)
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None
        elif not isinstance(event, h11.Data):
            raise h11.RemoteProtocolError(f"unexpected event {type(event).__name__}")
