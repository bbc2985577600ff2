"""The operator's proxy settings, for the clients of the operator's own endpoints.

``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (either case), read as httpx
reads them for a client with no transport of its own (its ``get_environment_proxies``):
httpx ignores them for a client given a transport, and every client of the egress port has
one (its guarded pool), so the port builds the proxied pools itself. Only the operator's
endpoints (model calls) go through them; a Spec's URLs never do (a proxy would hide the
address connected to from the policy). The proxies' hosts are the operator's, reached as its
endpoints are.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

import httpcore
import httpx
from httpx._utils import get_environment_proxies  # the rules httpx itself applies

from psych_runtime.activities.egress._guard import Guard, HttpcoreGuard
from psych_runtime.specs import SpecError

PROXY_SCHEMES = ("http", "https")
"""Proxies the model client can go through (SOCKS needs a package psych does not ship)."""

_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def operator_proxies() -> dict[str, str | None]:
    """httpx mount pattern -> proxy URL (None: straight to the host, from ``NO_PROXY``), as
    the process's environment says; empty when no proxy is set.

    Raises:
        SpecError: a proxy of a scheme other than http or https, naming its variable.
    """
    mounts = get_environment_proxies()
    for pattern, url in mounts.items():
        if url is None:
            continue
        scheme = httpx.URL(url).scheme
        if scheme not in PROXY_SCHEMES:
            raise SpecError(
                f"{_variable(pattern)}={_shown(url)}: a {scheme!r} proxy; the model "
                f"endpoints' client goes through {' or '.join(PROXY_SCHEMES)} proxies only"
            )
    return mounts


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


def _variable(pattern: str) -> str:
    """The variable a mount pattern came from (as set, either case)."""
    scheme = pattern.split("://", 1)[0].upper()
    name = f"{scheme}_PROXY" if f"{scheme}_PROXY" in _VARIABLES else "ALL_PROXY"
    return name if name in os.environ or name.lower() not in os.environ else name.lower()


def _shown(url: str) -> str:
    """``url`` without its credentials."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(userinfo=b"")) if parsed.userinfo else url
