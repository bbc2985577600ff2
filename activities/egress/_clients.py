"""The egress port: every outbound HTTP client of a worker is made here.

One factory per kind of transport: ``http`` (httpx: model endpoints, HTTP tools) and
``mcp_client`` / ``mcp_factory`` (httpx2, the MCP SDK's transports). Each client's
connection pool connects through a ``Guard`` of one tenant and origin, so a connection one
tenant was allowed is never reused by another tenant with other rules. Proxies from the
environment are not used for Spec URLs: the check is on the address connected to, which a
proxy hides (the operator's own endpoints keep them).
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpcore2
import httpx
import httpx2

from psych_runtime.activities.egress._bounds import (
    Bounded,
    Bounded2,
)
from psych_runtime.activities.egress._guard import (
    EgressDenied,
    Guard,
    Httpcore2Guard,
    HttpcoreGuard,
    Resolver,
    system_resolver,
)
from psych_runtime.activities.egress._proxies import (
    Bypassing,
    operator_proxies,
    proxied_transport,
    proxy_hosts,
)
from psych_runtime.activities.egress._rules import (
    EgressPolicy,
    EgressSettings,
    Origin,
    Refusal,
)

_log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
"""Redirects a Spec-named URL may take (each one judged again)."""
_MAX_CONNECTIONS, _MAX_KEEPALIVE, _KEEPALIVE_SECONDS = 100, 20, 5.0
"""httpx's own pool defaults."""


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context of every httpx pool made here: one per process.

    Building one loads certifi's CA bundle, ~20 ms of CPU, and each transport made two (its
    own pool's, then the guarded pool's): a worker's start, and each MCP session, paid for
    that again. A context is shared safely: the pools only wrap sockets with it, and the one
    setting httpcore makes on it per connection (its ALPN list) is the same for every pool
    here, none of which speaks HTTP/2.
    """
    return httpx.create_ssl_context(trust_env=False)


@functools.cache
def _tls2() -> ssl.SSLContext:
    """``_tls`` for the httpx2 pools of MCP sessions."""
    return httpx2.create_ssl_context(trust_env=False)


class Egress:
    """The worker's one egress port.

    ``operator_hosts`` are the hosts the operator configured (model endpoints): reached
    with origin ``operator`` whatever their address. Each refusal (``report``) is kept in
    ``refusals`` (the latest), logged as a warning and counted in the metric
    ``psych.egress.refused``, by rule kind and, when the request named one (``PURPOSE``),
    purpose kind.
    """

    def __init__(
        self,
        settings: EgressSettings | None = None,
        *,
        operator_hosts: frozenset[str] = frozenset(),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.settings = settings if settings is not None else EgressSettings.from_env()
        self.policy = EgressPolicy(self.settings, operator_hosts)
        self.resolver = resolver
        self.refusals: list[Refusal] = []
        self.connects = 0
        """Connections attempted through this port (to an address it allowed)."""
        self._clients: dict[tuple[str | None, Origin], httpx.AsyncClient] = {}

    def guard(self, tenant: str | None, origin: Origin) -> Guard:
        return Guard(
            self.policy,
            tenant=tenant,
            origin=origin,
            resolver=self.resolver,
            on_connect=self._connecting,
        )

    def _connecting(self, address: str) -> None:
        self.connects += 1

    def report(self, denied: EgressDenied) -> None:
        """Keep, log and count a refusal: a connection this port's clients refused (their
        transports report each), or a URL refused before any connection to it (an A2A
        webhook at registration). The log line is ``denied``'s message (what the request
        was for, the URL or host, the rule); the metric's attributes are the rule's kind
        and the purpose's kind, never free text."""
        refusal = denied.refusal
        self.refusals.append(refusal)
        del self.refusals[:-100]  # the latest, for the worker's status; metrics count all
        _log.warning("%s", denied)
        # Imported here: judging a Spec's URLs (``psych validate``) refuses without
        # connecting, and need not load OpenTelemetry; a worker has loaded it already.
        from psych_runtime.activities.telemetry import egress_refused

        egress_refused(refusal.kind, None if denied.purpose is None else denied.purpose.kind)

    def judge(self, url: str, tenant: str | None) -> Refusal | None:
        """``EgressPolicy.judge`` of this port's policy. Sends nothing."""
        return self.policy.judge(url, tenant)

    async def judge_resolved(self, url: str, tenant: str | None) -> Refusal | None:
        """``judge``, with the host looked up as the worker would (never connecting); a
        host that does not resolve here is not judged."""
        parts = urlsplit(url)
        host = parts.hostname
        if not host:
            return None
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        guard = Guard(self.policy, tenant=tenant, origin="spec", resolver=self.resolver)
        try:
            await guard.addresses(host, port)
        except EgressDenied as err:
            return err.refusal
        except OSError:
            return None
        return None

    def http(self, tenant: str | None = None, origin: Origin = "spec") -> httpx.AsyncClient:
        """The shared httpx client for ``tenant``'s requests from ``origin`` (closed by
        ``aclose``). Tenants without rules of their own share one client."""
        key = (tenant if tenant in self.settings.tenants else None, origin)
        client = self._clients.get(key)
        if client is None:
            guard = self.guard(key[0], origin)
            straight = self._bounded(_httpx_transport(guard))
            client = httpx.AsyncClient(
                transport=straight,
                mounts=self._proxied(guard, straight) if origin == "operator" else None,
                timeout=httpx.Timeout(60.0),
                follow_redirects=origin == "spec",
                max_redirects=MAX_REDIRECTS,
                trust_env=False,  # the operator's proxies: the mounts
            )
            self._clients[key] = client
        return client

    def _bounded(self, transport: httpx.AsyncBaseTransport) -> Bounded:
        return Bounded(transport, self.settings.max_response_bytes, self.report)

    def _proxied(
        self, guard: Guard, straight: httpx.AsyncBaseTransport
    ) -> dict[str, httpx.AsyncBaseTransport | None]:
        """The operator's proxy settings (``HTTPS_PROXY``, ...) as mounts: its own
        endpoints go through them, its proxies' hosts reached as those endpoints are; a
        Spec's URLs never go through a proxy, which would hide the address connected to.
        Until 12-08 the client was told to trust the environment, which httpx ignores for a
        client given a transport: no request went through a proxy. A URL whose host is an
        address in one of ``NO_PROXY``'s networks goes ``straight`` (the client's transport).

        Raises:
            SpecError: a proxy psych cannot go through, or a ``NO_PROXY`` entry that is no
                host, address or network (``operator_proxies``).
        """
        proxies = operator_proxies()
        self.policy.operator_hosts |= proxy_hosts(proxies.mounts)
        limits = (_MAX_CONNECTIONS, _MAX_KEEPALIVE, _KEEPALIVE_SECONDS)

        def through(url: str) -> httpx.AsyncBaseTransport:
            proxied = self._bounded(proxied_transport(url, guard, _tls(), limits=limits))
            return Bypassing(proxied, straight, proxies.networks) if proxies.networks else proxied

        return {
            pattern: None if url is None else through(url)
            for pattern, url in proxies.mounts.items()
        }

    def mcp_client(
        self,
        tenant: str | None,
        *,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
        on_refused: Callable[[Exception], None] | None = None,
        make: Callable[..., httpx2.AsyncClient] = httpx2.AsyncClient,
    ) -> httpx2.AsyncClient:
        """A new httpx2 client for an MCP session of ``tenant`` (its owner closes it),
        made by ``make`` (``httpx2.AsyncClient`` or a subclass's maker) with this port's
        transport and options.

        Redirects are left to the MCP SDK, which follows them within the server's origin.
        Bodies are bounded by ``max_response_bytes`` as ``http``'s are, but for event
        streams: a session's stream lives as long as the session, and the SDK bounds each
        of its events. ``on_refused`` is told of each body refused (``McpResponseTooLarge``):
        the SDK ends the session with a message of its own, which does not say why.
        """
        transport = httpx2.AsyncHTTPTransport(verify=_tls2(), trust_env=False)
        # httpx2 takes no network backend; its pool does (the same as httpcore2's default
        # but for the backend).
        transport._pool = httpcore2.AsyncConnectionPool(
            ssl_context=_tls2(),
            network_backend=Httpcore2Guard(self.guard(tenant, "spec")),
            max_connections=_MAX_CONNECTIONS,
            max_keepalive_connections=_MAX_KEEPALIVE,
            keepalive_expiry=_KEEPALIVE_SECONDS,
        )
        return make(
            transport=Bounded2(
                transport, self.settings.max_response_bytes, on_refused, self.report
            ),
            headers=headers,
            timeout=timeout if timeout is not None else httpx2.Timeout(30.0, read=300.0),
            auth=auth,
            trust_env=False,
        )

    def mcp_factory(
        self,
        tenant: str | None,
        on_refused: Callable[[Exception], None] | None = None,
        make: Callable[..., httpx2.AsyncClient] = httpx2.AsyncClient,
    ) -> Any:
        """``mcp_client`` as the MCP SDK's ``httpx_client_factory`` (the SSE transport),
        its client made by ``make``."""

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return self.mcp_client(
                tenant,
                headers=headers,
                timeout=timeout,
                auth=auth,
                on_refused=on_refused,
                make=make,
            )

        return factory

    async def aclose(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()


def _httpx_transport(guard: Guard) -> httpx.AsyncHTTPTransport:
    transport = httpx.AsyncHTTPTransport(verify=_tls(), trust_env=False)
    # httpx takes no network backend; its pool does (built as httpx builds it).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=_tls(),
        network_backend=HttpcoreGuard(guard),
        max_connections=_MAX_CONNECTIONS,
        max_keepalive_connections=_MAX_KEEPALIVE,
        keepalive_expiry=_KEEPALIVE_SECONDS,
    )
    return transport


__all__ = ["Egress", "EgressDenied"]
