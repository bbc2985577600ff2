"""Response bodies bounded by the egress policy's ``max_response_bytes``.

``Bounded`` wraps an httpx transport (model endpoints, HTTP tools, A2A), ``Bounded2`` an
httpx2 one (MCP sessions and their OAuth requests); both are where a refused connection of
a request that named its purpose (``PURPOSE``) is said to be for it, and where every
refused connection is told to the port (``denied``: its log line and metric, with that
purpose). A body declared
larger is refused before it is read, one that grows past the bound fails as it is read.
The bound counts
decoded bytes: bodies are asked for unencoded (``Accept-Encoding: identity``), a gzip or
deflate body sent anyway is decoded here, a chunk at a time and never past the bound (a
few KB of gzip can decode to gigabytes), and a body in another encoding is refused. An
MCP event stream is left whole when the request asked for one: it lives as long as its
session, and the MCP SDK bounds each event. The MCP SDK reads a session's replies in a task
of its own, where a transport error ends the session with its own generic message
("Connection closed"), so ``Bounded2`` also tells its ``on_refused`` of each refusal: the
session's owner says why it ended (the URL and the bound), not the SDK.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import httpx
import httpx2

from psych_runtime.activities.egress._guard import PURPOSE, EgressDenied
from psych_runtime.activities.egress._sent import ANSWERED, attempting, failed

_INFLATED = frozenset({"gzip", "x-gzip", "deflate"})
"""Encodings decoded here (``zlib`` reads gzip and zlib-wrapped deflate alike)."""
_NO_BODY = frozenset({204, 304})
_WITH_HEADER = 32 + zlib.MAX_WBITS
"""zlib's window bits for a gzip or a zlib header, whichever comes."""
_GZIP_MAGIC = b"\x1f\x8b"


class ResponseTooLarge(httpx.TransportError):
    """A response body past the egress policy's bound (``max_response_bytes``), or in an
    encoding whose decoded size cannot be bounded."""


class McpResponseTooLarge(httpx2.TransportError):
    """The same, on an MCP session's client (an httpx2 error, which the MCP SDK handles)."""


def _message(limit: int, size: int, method: str, url: str) -> str:
    return (
        f"response too large: {method} {url} sent over {limit} bytes (the egress "
        f"policy's max_response_bytes; {size} so far)"
    )


async def _capped(
    chunks: AsyncIterator[bytes], limit: int, fail: Callable[[int], Exception]
) -> AsyncGenerator[bytes]:
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise fail(size)
        yield chunk


async def _inflated(
    chunks: AsyncIterator[bytes],
    limit: int,
    fail: Callable[[int], Exception],
    broken: Callable[[str], Exception],
) -> AsyncGenerator[bytes]:
    """The decoded body, bounded twice: its decoded bytes, and the bytes on the wire (a
    stream of empty deflate blocks decodes to nothing). Members of a gzip body sent back
    to back are decoded in turn; a zlib header missing (raw deflate, as some servers send
    ``deflate``) is read as raw; a body cut short, or anything after its end, is refused."""
    inflater = zlib.decompressobj(_WITH_HEADER)
    raw = decoded = 0
    started = False
    try:
        async for chunk in chunks:
            raw += len(chunk)
            if raw > limit:
                raise fail(raw)
            data = chunk
            while data:
                try:
                    # Never more than one byte past the bound per step, whatever the ratio.
                    out = inflater.decompress(data, limit - decoded + 1)
                except zlib.error:
                    if started:
                        raise
                    inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # no header: raw deflate
                    out = inflater.decompress(data, limit - decoded + 1)
                started = True
                decoded += len(out)
                if decoded > limit:
                    raise fail(decoded)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if inflater.eof and inflater.unused_data:
                    rest = inflater.unused_data
                    if not rest.startswith(_GZIP_MAGIC):
                        raise broken("bytes after the end of the encoded body")
                    inflater = zlib.decompressobj(_WITH_HEADER)  # the next gzip member
                    data = rest
        tail = inflater.flush()
        ended = inflater.eof
    except zlib.error as err:
        raise broken(str(err)) from err
    decoded += len(tail)
    if decoded > limit:
        raise fail(decoded)
    if tail:
        yield tail
    if started and not ended:
        raise broken("the encoded body was cut short")


class _Body:
    """A response body as an async byte stream of either library."""

    def __init__(self, body: AsyncGenerator[bytes], inner: Any) -> None:
        self.body, self.inner = body, inner

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.body

    async def aclose(self) -> None:
        await self.body.aclose()
        await self.inner.aclose()


class _Stream(_Body, httpx.AsyncByteStream):
    pass


class _Stream2(_Body, httpx2.AsyncByteStream):
    pass


async def _bounded(
    lib: Any,
    request: Any,
    response: Any,
    limit: int,
    error: type[ResponseTooLarge] | type[McpResponseTooLarge],
    stream: type[_Stream] | type[_Stream2],
    on_refused: Callable[[Exception], None] | None = None,
) -> Any:
    """``response`` with its body bounded (the module docstring), in ``lib`` (httpx or
    httpx2) terms; ``on_refused`` is told of each refusal before it is raised."""
    method, url = request.method, str(request.url.copy_with(query=None))

    def refused(message: str) -> Exception:
        made = error(message, request=request)
        if on_refused is not None:
            on_refused(made)
        return made

    def fail(size: int) -> Exception:
        return refused(_message(limit, size, method, url))

    def broken(said: str) -> Exception:
        decoding: type[Exception] = lib.DecodingError
        return decoding(f"{method} {url}: its encoded body does not decode: {said}")

    encoding = response.headers.get("content-encoding", "").strip().lower()
    declared = response.headers.get("content-length", "")
    bodiless = response.status_code in _NO_BODY or method == "HEAD" or declared == "0"
    if encoding in ("", "identity") or bodiless:
        if declared.isdigit() and int(declared) > limit:
            await response.aclose()
            raise fail(int(declared))
        body = _capped(response.stream.__aiter__(), limit, fail)
        headers = response.headers
    elif encoding in _INFLATED:
        body = _inflated(response.stream.__aiter__(), limit, fail, broken)
        # As bytes: a header value httpx would not encode again (non-ASCII) stays as sent.
        headers = lib.Headers(
            [
                (name, value)
                for name, value in response.headers.raw
                if name.lower() not in (b"content-encoding", b"content-length")
            ]
        )
    else:
        await response.aclose()
        raise refused(
            f"response refused: {method} {url} sent a {encoding}-encoded body though asked "
            "for none; its decoded size could not be bounded (the egress policy's "
            "max_response_bytes)"
        )
    return lib.Response(
        response.status_code,
        headers=headers,
        stream=stream(body, response.stream),
        extensions=response.extensions,
    )


Denied = Callable[[EgressDenied], None]
"""Told of each refused connection, with its request's purpose (the port's log and metric)."""


def _denied(err: EgressDenied, request: Any, denied: Denied | None) -> EgressDenied:
    told = err.for_purpose(request.extensions.get(PURPOSE))
    told.redirected = bool(request.extensions.get(ANSWERED))
    if denied is not None:
        denied(told)
    return told


class Bounded(httpx.AsyncBaseTransport):
    """An httpx transport whose response bodies stop at ``limit`` decoded bytes; each
    refused connection is told to ``denied``."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, limit: int, denied: Denied | None = None
    ) -> None:
        self.inner = inner
        self.limit = limit
        self.denied = denied

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        try:
            response = await self.inner.handle_async_request(request)
        except EgressDenied as err:
            raise _denied(err, request, self.denied) from None
        request.extensions[ANSWERED] = True  # a redirect's request is built from these
        bounded: httpx.Response = await _bounded(
            httpx, request, response, self.limit, ResponseTooLarge, _Stream
        )
        return bounded

    async def aclose(self) -> None:
        await self.inner.aclose()


class Bounded2(httpx2.AsyncBaseTransport):
    """``Bounded`` for an httpx2 transport; an event stream asked for is passed whole.
    ``on_refused`` is told of each ``McpResponseTooLarge`` before it is raised, ``denied``
    of each refused connection."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        limit: int,
        on_refused: Callable[[Exception], None] | None = None,
        denied: Denied | None = None,
    ) -> None:
        self.inner = inner
        self.limit = limit
        self.on_refused = on_refused
        self.denied = denied

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        attempt = attempting(request)  # for the call that asked (``attempts``)
        try:
            response = await self.inner.handle_async_request(request)
        except EgressDenied as err:
            told = _denied(err, request, self.denied)
            failed(attempt, request, told)
            raise told from None
        except httpx2.TransportError as err:
            failed(attempt, request, err)
            raise
        # An event stream passes whole only where the request asked for one (a session's
        # stream): a body read whole (an OAuth document, a reply) labelled so is bounded.
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        asked = "text/event-stream" in request.headers.get("accept", "")
        plain = response.headers.get("content-encoding", "").strip().lower() in ("", "identity")
        if media == "text/event-stream" and asked and plain:
            return response
        bounded: httpx2.Response = await _bounded(
            httpx2, request, response, self.limit, McpResponseTooLarge, _Stream2, self.on_refused
        )
        return bounded

    async def aclose(self) -> None:
        await self.inner.aclose()
