"""The check on the address actually connected to, inside the HTTP clients' connection pools.

httpx and the MCP SDK's httpx2 both open connections through a network backend
(``httpcore`` / ``httpcore2`` ``AsyncNetworkBackend``). The guard is that backend: it
resolves the host itself, judges every address (``EgressPolicy``), and connects to an
address it allowed, so no second lookup can answer differently (no DNS-rebinding window).
TLS still names the host: the connection pool starts TLS on the returned stream with the
URL's host as the server name. A redirect is a new request and a new host, so it is judged
again; a refused connection raises ``EgressDenied`` before any packet is sent to it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpcore
import httpcore2

from psych_runtime.activities.egress._rules import EgressPolicy, IPAddress, Origin, Refusal

PURPOSE = "psych_egress_purpose"
"""The request extension naming what a request is for (a ``Purpose``): the port's
transports add it to the refusal of that request, its log line and its metric, so an error
met far from where the request was made (inside a library's flow) still says which
connection of whose it was."""

PurposeKind = Literal["mcp_oauth", "a2a_push"]
"""What kind of request a ``Purpose`` names (the metric's ``psych.egress.purpose``: a few
fixed words, never free text): ``mcp_oauth``, an MCP server's OAuth requests (its
metadata, its authorization server's discovery and token endpoint, the code exchange of a
person's consent); ``a2a_push``, an A2A push notification to a caller's webhook."""


@dataclass(frozen=True)
class Purpose:
    """What a request is for: ``said`` in its refusal's message and log line (``"the
    authorization server of MCP server 'crm'"``), ``kind`` as the metric's attribute."""

    kind: PurposeKind
    said: str


class EgressDenied(Exception):
    """A connection the egress policy refused; ``refusal.rule`` names the rule, and
    ``purpose`` what the request was for, when its maker said (``PURPOSE``).

    ``redirected``: the refused request is a redirect the server answered an earlier
    request with (set by the port's httpx transport): that earlier request was sent.
    """

    def __init__(
        self, refusal: Refusal, url: str | None = None, purpose: Purpose | None = None
    ) -> None:
        said = refusal.message(url)
        super().__init__(said if purpose is None else f"{purpose.said}: {said}")
        self.refusal = refusal
        self.purpose = purpose
        self.redirected = False

    def for_purpose(self, purpose: object) -> EgressDenied:
        """This refusal naming ``purpose`` (a request's ``PURPOSE``; itself when the
        request named none, or its refusal already names one)."""
        if not isinstance(purpose, Purpose) or self.purpose is not None:
            return self
        return EgressDenied(self.refusal, purpose=purpose)


Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Host and port to the addresses to try, in order (the tests give one of their own)."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host`` (TCP), each once, in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _Inner(Protocol):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (the backend's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any: ...


class Guard:
    """One tenant's and origin's judge of connections, shared by both transports."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        tenant: str | None,
        origin: Origin,
        resolver: Resolver = system_resolver,
        on_connect: Callable[[str], None] | None = None,
    ) -> None:
        self.policy = policy
        self.on_connect = on_connect
        self.tenant = tenant
        self.origin = origin
        self.resolver = resolver

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses of ``host`` this guard allows, in the resolver's order.

        Raises:
            EgressDenied: the name, or every address it resolves to, is refused.
        """
        refusal = self.policy.decide(host, None, tenant=self.tenant, origin=self.origin)
        if refusal is not None:
            raise EgressDenied(refusal)
        try:
            literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        found = [str(literal)] if literal is not None else await self.resolver(host, port)
        allowed: list[str] = []
        first: Refusal | None = None
        for text in found:
            refusal = self.policy.decide(
                host, ipaddress.ip_address(text), tenant=self.tenant, origin=self.origin
            )
            if refusal is None:
                allowed.append(text)
            elif first is None:
                first = refusal
        if not allowed:
            if first is None:
                raise OSError(f"{host} resolved to no address")
            raise EgressDenied(first)
        return allowed

    async def connect(
        self, inner: _Inner, host: str, port: int, connect_error: type[Exception], **options: Any
    ) -> Any:
        """Connect ``inner`` to an allowed address of ``host``; a failed lookup is a
        ``connect_error`` (the transport's own), as the backend's own lookup would be."""
        try:
            addresses = await self.addresses(host, port)
        except OSError as err:
            raise connect_error(str(err)) from err
        last: Exception | None = None
        for address in addresses:
            if self.on_connect is not None:
                self.on_connect(address)
            try:
                return await inner.connect_tcp(address, port, **options)
            except OSError as err:  # the next address, as a resolver's caller would
                last = err
            except (httpcore.ConnectError, httpcore2.ConnectError) as err:
                last = err
        assert last is not None
        raise last


class _Backend:
    """What both transports' guarded backends do; each names its library's connect error
    and inner backend (their base classes differ only by library)."""

    guard: Guard
    inner: Any
    connect_error: type[Exception]

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (the backend's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        return await self.guard.connect(
            self.inner,
            host,
            port,
            self.connect_error,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (the backend's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        raise EgressDenied(Refusal(path, None, "unix sockets are never reachable", "unix_socket"))

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class HttpcoreGuard(_Backend, httpcore.AsyncNetworkBackend):
    """The guard as httpx's network backend."""

    connect_error = httpcore.ConnectError

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.inner = httpcore.AnyIOBackend()


class Httpcore2Guard(_Backend, httpcore2.AsyncNetworkBackend):
    """The guard as httpx2's network backend (the MCP SDK's transports)."""

    connect_error = httpcore2.ConnectError

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.inner = httpcore2.AnyIOBackend()
