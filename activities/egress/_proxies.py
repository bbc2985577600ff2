"""The operator's proxy settings, for the clients of the operator's own endpoints.

``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (either case, the lower
case one winning when both are set), read as httpx reads them for a client with no transport
of its own (its ``get_environment_proxies``): httpx ignores them for a client given a
transport, and every client of the egress port has one (its guarded pool), so the port
builds the proxied pools itself. A ``NO_PROXY`` network (``10.0.0.0/8``, ``fd00::/8``), which
httpx's mounts cannot express, sends the addresses in it straight (``Bypassing``); so do
``localhost`` and loopback addresses, always (``LOOPBACK``, as Go's proxy rules have it: a
model server on the worker's own host, ``psych dev --fake-model``'s among them). Only the
operator's endpoints (model calls) go through them; a Spec's URLs never do (a proxy would
hide the address connected to from the policy). The proxies' hosts are the operator's,
reached as its endpoints are.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import httpcore
import httpx
from httpx._utils import URLPattern, get_environment_proxies  # the rules httpx applies

from psych_runtime.activities.egress._guard import Guard, HttpcoreGuard
from psych_runtime.specs import SpecError

PROXY_SCHEMES = ("http", "https")
"""Proxies the model client can go through (SOCKS needs a package psych does not ship)."""

_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)
"""Addresses never reached through a proxy (with the name ``localhost``): a proxy elsewhere
would reach its own host, not the worker's."""


@dataclass(frozen=True)
class Proxies:
    """The operator's proxy settings, as the process's environment says."""

    mounts: dict[str, str | None]
    """httpx mount pattern -> proxy URL (None: straight to the host, from ``NO_PROXY``);
    empty when no proxy is set."""
    networks: tuple[Network, ...] = ()
    """``NO_PROXY``'s networks: a URL whose host is an address in one goes straight."""


def operator_proxies() -> Proxies:
    """The operator's proxy settings, each checked.

    Raises:
        SpecError: a proxy that is no URL, names no host, or is of a scheme other than
            http or https, naming its variable (never its credentials); a ``NO_PROXY``
            entry that is no host, address or network, naming it.
    """
    mounts: dict[str, str | None] = {}
    networks: list[Network] = []
    for pattern, url in get_environment_proxies().items():
        if url is not None:
            _check_proxy(_variable(pattern), url)
        else:
            network = _network(pattern)
            if network is not None:
                networks.append(network)
                continue
            _check_pattern(pattern)
        mounts[pattern] = url
    if any(url is not None for url in mounts.values()):
        mounts.setdefault("all://localhost", None)
        networks += LOOPBACK
    return Proxies(mounts, tuple(networks))


def proxy_hosts(mounts: Mapping[str, str | None]) -> frozenset[str]:
    """The hosts of the proxies in ``mounts`` (lower case)."""
    return frozenset(httpx.URL(url).host.lower() for url in mounts.values() if url is not None)


def proxied_transport(
    url: str, guard: Guard, tls: ssl.SSLContext, *, limits: tuple[int, int, float]
) -> httpx.AsyncHTTPTransport:
    """An httpx transport through the proxy at ``url`` whose connections ``guard`` judges
    (built as httpx builds one for ``proxy=``, with the guard's network backend); ``tls``:
    the port's shared SSL context; ``limits``: connections, keep-alive ones, keep-alive
    seconds."""
    proxy = httpx.Proxy(url=url)
    transport = httpx.AsyncHTTPTransport(verify=tls, trust_env=False)
    connections, keepalive, expiry = limits
    transport._pool = httpcore.AsyncHTTPProxy(
        proxy_url=httpcore.URL(
            scheme=proxy.url.raw_scheme,
            host=proxy.url.raw_host,
            port=proxy.url.port,
            target=proxy.url.raw_path,
        ),
        proxy_auth=proxy.raw_auth,
        proxy_headers=proxy.headers.raw,
        proxy_ssl_context=proxy.ssl_context,
        ssl_context=tls,
        max_connections=connections,
        max_keepalive_connections=keepalive,
        keepalive_expiry=expiry,
        network_backend=HttpcoreGuard(guard),
    )
    return transport


class Bypassing(httpx.AsyncBaseTransport):
    """A proxied transport (``proxied``) that sends a request whose host is an address in
    one of ``networks`` (``NO_PROXY``'s) straight, through ``straight``: the client's own
    transport, which the client closes."""

    def __init__(
        self,
        proxied: httpx.AsyncBaseTransport,
        straight: httpx.AsyncBaseTransport,
        networks: tuple[Network, ...],
    ) -> None:
        self.proxied = proxied
        self.straight = straight
        self.networks = networks

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            address = ipaddress.ip_address(request.url.host)
        except ValueError:  # a name: NO_PROXY's networks are matched by address only
            return await self.proxied.handle_async_request(request)
        straight = any(address in network for network in self.networks)
        return await (self.straight if straight else self.proxied).handle_async_request(request)

    async def aclose(self) -> None:
        await self.proxied.aclose()


def _check_proxy(variable: str, url: str) -> None:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as err:
        raise SpecError(f"{variable}: not a proxy URL ({err})") from None
    if parsed.scheme not in PROXY_SCHEMES:
        raise SpecError(
            f"{variable}={_shown(url, parsed)}: a {parsed.scheme!r} proxy; the model "
            f"endpoints' client goes through {' or '.join(PROXY_SCHEMES)} proxies only"
        )
    if not parsed.host:
        raise SpecError(f"{variable}: a proxy URL with no host")


def _network(pattern: str) -> Network | None:
    """The network of a ``NO_PROXY`` entry written as one (``10.0.0.0/8``, which httpx
    makes ``all://10.0.0.0/8``, matching that one address); None for any other entry.

    Raises:
        SpecError: an address with a prefix that is no network's (``10.0.0.0/99``).
    """
    entry = pattern.removeprefix("all://")
    entry = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
    address, slash, _ = entry.partition("/")
    if entry == pattern or not slash:
        return None
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return None
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        raise SpecError(
            f"{_named('NO_PROXY')}: {entry!r} is not a network (an address, a slash and "
            "the prefix length)"
        ) from None


def _check_pattern(pattern: str) -> None:
    """A ``NO_PROXY`` entry httpx can match (it refuses one when the client is made)."""
    try:
        URLPattern(pattern)
    except httpx.InvalidURL as err:
        entry = _entry(pattern)
        raise SpecError(
            f"{_named('NO_PROXY')}: {entry!r} is not a host, address or network ({err})"
        ) from None


def _entry(pattern: str) -> str:
    """The ``NO_PROXY`` entry httpx made the mount ``pattern`` of."""
    entries = (entry.strip() for entry in os.environ.get(_named("NO_PROXY"), "").split(","))
    for entry in entries:
        if pattern in (entry, f"all://{entry}", f"all://[{entry}]", f"all://*{entry}"):
            return entry
    return pattern


def _variable(pattern: str) -> str:
    """The variable a proxy's mount pattern came from (as set, either case)."""
    scheme = pattern.split("://", 1)[0].upper()
    name = f"{scheme}_PROXY" if f"{scheme}_PROXY" in _VARIABLES else "ALL_PROXY"
    return _named(name)


def _named(name: str) -> str:
    """``name`` as set: its lower case spelling wins when both are set (urllib's rule)."""
    return name.lower() if os.environ.get(name.lower()) else name


def _shown(url: str, parsed: httpx.URL) -> str:
    """``url`` (``parsed``) without its credentials."""
    return str(parsed.copy_with(userinfo=b"")) if parsed.userinfo else url
