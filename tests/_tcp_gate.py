"""A TCP relay on 127.0.0.1 in front of a loopback server, which a test closes and opens
again: the server looks unreachable (connections refused, those open cut) while the
relay is closed, and answers again on the same port once it is opened."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import pytest

from tests._ports import free_port
from tests._s3_server import S3_ENV


class TcpGate:
    """Relays ``127.0.0.1:port`` to ``target_port`` while open (``open``/``close``)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._cut_at: bytes | None = None
        self.cuts = 0
        """Connections cut by ``cut_when``."""

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the relay's address."""
        return f"http://127.0.0.1:{self.port}"

    async def open(self) -> None:
        """Listen again (on the same port): connections are relayed."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._relay, "127.0.0.1", self.port, reuse_address=True
            )

    async def close(self) -> None:
        """Stop listening (new connections are refused) and cut those open."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        pipes, self._pipes = self._pipes, set()
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)

    def shut(self) -> None:
        """``close`` from synchronous code in the gate's loop (a fake model's responder):
        new connections are refused at once, those open are cut as their pipes end."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for pipe in self._pipes:
            pipe.cancel()

    def cut_when(self, marker: bytes) -> None:
        """Cut each connection whose request bytes hold ``marker``, before they reach the
        server (the gate stays open): those requests, and only they, fail as a connection
        reset, wherever they come in a sequence of requests. Each, not the first only:
        aiohttp sends an idempotent request (an S3 PUT) again, once, when a kept-alive
        connection is cut before its answer."""
        self._cut_at = marker

    def _cuts(self, chunk: bytes) -> bool:
        """Whether the request bytes ``chunk`` (with what came before on its connection:
        see ``_relay``) are the ones to cut (``cut_when``)."""
        if self._cut_at is None or self._cut_at not in chunk:
            return False
        self.cuts += 1
        return True

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        sides = [writer]
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return
            sides.append(up_writer)
            try:
                await asyncio.gather(
                    _pipe(reader, up_writer, self._cuts), _pipe(up_reader, writer, None)
                )
            except _Cut:
                for side in sides:  # a reset, on both sides
                    side.transport.abort()
        finally:
            # Both closed before either is waited for: ``close`` and ``shut`` cancel this
            # task, maybe while it waits, and a side left unclosed is a ResourceWarning in
            # whichever test the collector finds it (a CI run's failure, 12-06).
            for side in sides:
                side.close()
            self._pipes.discard(task)
            for side in sides:
                with contextlib.suppress(OSError):
                    await side.wait_closed()


class _Cut(Exception):
    """A connection ``TcpGate.cut_when`` cuts."""


async def _pipe(
    source: asyncio.StreamReader,
    sink: asyncio.StreamWriter,
    cuts: Callable[[bytes], bool] | None,
) -> None:
    seen = b""  # the tail of what came before: a marker split across two reads is found
    try:
        while chunk := await source.read(65536):
            if cuts is not None:
                if cuts(seen + chunk):
                    raise _Cut
                seen = chunk[-4096:]
            sink.write(chunk)
            await sink.drain()
    except OSError:
        pass
    finally:
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()


@asynccontextmanager
async def tcp_gate(target_port: int) -> AsyncIterator[TcpGate]:
    """An open ``TcpGate`` to ``target_port``, closed on leaving."""
    gate = TcpGate(target_port)
    await gate.open()
    try:
        yield gate
    finally:
        await gate.close()


@asynccontextmanager
async def s3_gate(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TcpGate]:
    """A ``TcpGate`` to the S3 server at ``endpoint``, with the S3 test environment set
    and the worker's clients making one attempt per request (``AWS_MAX_ATTEMPTS``)."""
    for name, value in {**S3_ENV, "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    port = urlsplit(endpoint).port
    assert port is not None
    async with tcp_gate(port) as relay:
        yield relay
