"""What a pooled session's transport streams show its owner: that the server's side ended,
and how many messages the session handed to the transport.

An SSE server that shuts down cleanly ends its event stream; the SDK then closes the
session's dispatcher and refuses every later request with "Connection closed" before
sending it, yet nothing tells the session's owner, which would lend the session on. The
read side, watched here, tells it (``StreamWatch.on_end``), so the pool connects afresh.

A request the SDK refused so never reached the transport: ``handed`` counts each message
written to the transport's stream (and every write that may have reached it), so a lease
whose count did not move knows that nothing it asked for can have left the worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio

T = TypeVar("T")

_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


@dataclass
class StreamWatch:
    """A session's transport streams, as its owner sees them."""

    on_end: Callable[[], None]
    """Called once, when the server's side of the session ended (its stream closed) after
    it was connected."""
    live: bool = False
    """The session is connected (set by ``open_client``): an end before, such as that of
    a handshake refused before the fallback, is not the session's."""
    ended: bool = False
    handed: int = 0
    """Messages written to the transport, or whose write may have reached it."""

    def end(self) -> None:
        if self.live and not self.ended:
            self.ended = True
            self.on_end()


class _Reading(Generic[T]):
    """The transport's read stream, telling ``watch`` when it ends."""

    def __init__(self, inner: Any, watch: StreamWatch) -> None:
        self._inner = inner
        self._watch = watch

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK's context streams)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> T:
        try:
            item: T = await self._inner.receive()
        except _ENDED:
            self._watch.end()
            raise
        return item

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Reading[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Reading[T]:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Writing(Generic[T]):
    """The transport's write stream, counting in ``watch`` what may have reached it.

    A write after this side closed provably did not (the SDK closes it when the session
    ends); nor did one the stream refused: ``BrokenResourceError`` (no receiver took it) or
    ``ClosedResourceError`` (the transport closed the stream first, as the SSE transport's
    writer does when one POST fails; or while the write waited, which anyio withdraws
    undelivered); any other, cancelled ones included, may have been."""

    def __init__(self, inner: Any, watch: StreamWatch) -> None:
        self._inner = inner
        self._watch = watch
        self._closed = False

    async def send(self, item: T) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self._watch.handed += 1
        try:
            await self._inner.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # Not consumed: no receiver took it, or the stream was closed before (or while
            # waiting: withdrawn) by the transport. Until 12-07 a ClosedResourceError counted,
            # and a call the SDK could not hand over was taken as one that may have run.
            self._watch.handed -= 1
            raise

    def close(self) -> None:
        self._closed = True
        self._inner.close()

    async def aclose(self) -> None:
        self._closed = True
        await self._inner.aclose()

    async def __aenter__(self) -> _Writing[T]:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def watched(
    transport: AbstractAsyncContextManager[tuple[Any, Any]], watch: StreamWatch
) -> AsyncIterator[tuple[Any, Any]]:
    """``transport`` (an SDK transport yielding its read and write streams), its streams
    watched by ``watch``."""
    async with transport as (read, write):
        yield _Reading[Any](read, watch), _Writing[Any](write, watch)
