"""Response bodies bounded by the egress policy's ``max_response_bytes``.

``Bounded`` wraps an httpx transport (model endpoints, HTTP tools, A2A), ``Bounded2`` an
httpx2 one (MCP sessions and their OAuth requests): a body declared larger is refused
before it is read, one that grows past the bound fails as it is read. Bodies are asked
for unencoded (``Accept-Encoding: identity``) and one sent encoded anyway is refused: the
bound counts the bytes that arrive, and a few KB of gzip can decode to gigabytes. An MCP
event stream is left whole when the request asked for one: it lives as long as its
session, and the MCP SDK bounds each event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import httpx2


class ResponseTooLarge(httpx.TransportError):
    """A response body past the egress policy's bound (``max_response_bytes``)."""


class McpResponseTooLarge(httpx2.TransportError):
    """The same, on an MCP session's client (an httpx2 error, which the MCP SDK handles)."""


def _message(limit: int, size: int, method: str, url: str) -> str:
    return (
        f"response too large: {method} {url} sent over {limit} bytes (the egress "
        f"policy's max_response_bytes; {size} so far)"
    )


def _declared(headers: httpx.Headers | httpx2.Headers) -> int | None:
    declared = headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


def _encoding(headers: httpx.Headers | httpx2.Headers) -> str | None:
    """The response's content encoding, None when it is sent as is."""
    encoding = headers.get("content-encoding", "").strip().lower()
    return None if encoding in ("", "identity") else encoding


def _encoded(encoding: str, method: str, url: str) -> str:
    return (
        f"response refused: {method} {url} sent a {encoding}-encoded body though asked for "
        "none; its decoded size could not be bounded (the egress policy's max_response_bytes)"
    )


async def _capped(
    chunks: AsyncIterator[bytes], limit: int, fail: Callable[[int], Exception]
) -> AsyncIterator[bytes]:
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise fail(size)
        yield chunk


class Bounded(httpx.AsyncBaseTransport):
    """An httpx transport whose response bodies stop at ``limit`` bytes."""

    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self.inner.handle_async_request(request)
        url = str(request.url.copy_with(query=None))

        def fail(size: int) -> ResponseTooLarge:
            return ResponseTooLarge(
                _message(self.limit, size, request.method, url), request=request
            )

        encoding = _encoding(response.headers)
        if encoding is not None:
            await response.aclose()
            raise ResponseTooLarge(_encoded(encoding, request.method, url), request=request)
        declared = _declared(response.headers)
        if declared is not None and declared > self.limit:
            await response.aclose()
            raise fail(declared)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Stream(response.stream, self.limit, fail),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Stream(httpx.AsyncByteStream):
    def __init__(
        self, inner: httpx.AsyncByteStream, limit: int, fail: Callable[[int], Exception]
    ) -> None:
        self.inner, self.limit, self.fail = inner, limit, fail

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _capped(self.inner.__aiter__(), self.limit, self.fail)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Bounded2(httpx2.AsyncBaseTransport):
    """``Bounded`` for an httpx2 transport; event streams are passed whole."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self.inner.handle_async_request(request)
        url = str(request.url.copy_with(query=None))

        def fail(size: int) -> McpResponseTooLarge:
            return McpResponseTooLarge(
                _message(self.limit, size, request.method, url), request=request
            )

        encoding = _encoding(response.headers)
        if encoding is not None:
            await response.aclose()
            raise McpResponseTooLarge(_encoded(encoding, request.method, url), request=request)
        # An event stream passes whole only where the request asked for one (a session's
        # stream): a body read whole (an OAuth document, a reply) labelled so is bounded.
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media == "text/event-stream" and "text/event-stream" in request.headers.get(
            "accept", ""
        ):
            return response
        declared = _declared(response.headers)
        if declared is not None and declared > self.limit:
            await response.aclose()
            raise fail(declared)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Stream2(response.stream, self.limit, fail),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Stream2(httpx2.AsyncByteStream):
    def __init__(
        self, inner: httpx2.AsyncByteStream, limit: int, fail: Callable[[int], Exception]
    ) -> None:
        self.inner, self.limit, self.fail = inner, limit, fail

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _capped(self.inner.__aiter__(), self.limit, self.fail)

    async def aclose(self) -> None:
        await self.inner.aclose()
