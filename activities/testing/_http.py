"""The fake model's HTTP/1.1 plumbing over h11: what a handler decided to send, reading a
request and sending a response (plain, streamed, paused or dropped)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import h11

_MAX_READ = 65536


class _Drop(Exception):
    """Raised inside a response to reset the connection instead of finishing it."""


@dataclass
class _Response:
    """What a handler decided to send.

    A plain response sends `body` after waiting `delay` seconds; a streamed one (`chunks`
    set) pauses `pause_seconds` after `pause_after` chunks, or resets the connection after
    `drop_after` chunks; `chunk_delay` seconds pass between chunks.
    """

    status: int
    body: dict[str, Any] | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    delay: float = 0.0
    chunks: list[dict[str, Any]] | None = None
    pause_after: int | None = None
    pause_seconds: float = 0.0
    drop_after: int | None = None
    chunk_delay: float = 0.0


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request, bytes] | None:
    """Read one whole request; None when the client closed the connection between requests."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_MAX_READ))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:
            raise h11.LocalProtocolError(f"unexpected event {event!r}")


_WATCH_SECONDS = 0.05


async def _pause(reader: asyncio.StreamReader, seconds: float) -> None:
    """Stay silent `seconds`, as a provider does; like one, notice a client that leaves.

    Raises `ConnectionResetError` as soon as the client has closed its end: a stalled
    stream is then counted as cut when the client left, not when the silence ends.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        if reader.at_eof():
            raise ConnectionResetError("the client went away while the response was silent")
        await asyncio.sleep(min(left, _WATCH_SECONDS))


async def _send(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    response: _Response,
) -> None:
    """Send `response`, acting out its pause or drop; raises `_Drop` to reset the connection
    and `ConnectionError` when the client leaves first."""

    async def write(event: h11.Event) -> None:
        data = conn.send(event)
        if data:
            writer.write(data)
            await writer.drain()

    if response.chunks is None:
        payload = json.dumps(response.body).encode()
        await _pause(reader, response.delay)
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(payload))),
            *response.headers,
        ]
        await write(h11.Response(status_code=response.status, headers=headers))
        await write(h11.Data(data=payload))
        await write(h11.EndOfMessage())
        return
    # No content-length: h11 frames the stream with chunked transfer encoding.
    await write(h11.Response(status_code=response.status, headers=response.headers))
    for sent, chunk in enumerate(response.chunks):
        if sent == response.drop_after:
            raise _Drop
        if sent == response.pause_after:
            await _pause(reader, response.pause_seconds)
        elif sent and response.chunk_delay:
            await asyncio.sleep(response.chunk_delay)
        await write(h11.Data(data=b"data: " + json.dumps(chunk).encode() + b"\n\n"))
    if response.pause_after == len(response.chunks):
        await _pause(reader, response.pause_seconds)
    await write(h11.Data(data=b"data: [DONE]\n\n"))
    await write(h11.EndOfMessage())
