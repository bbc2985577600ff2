"""Whether a request that failed had left: ``never_sent`` reads it from the failure, for an
activity that must not claim a call not safe to repeat ran when it provably did not (its
connection refused or never made), nor that it did not when it may have (its redirect
refused: the request before it was sent and answered)."""

from __future__ import annotations

import httpx

from psych_runtime.activities.egress._guard import EgressDenied

ANSWERED = "psych_egress_answered"
"""The request extension the egress port's httpx transport sets on a request once its
response came: a redirect's request (httpx copies the extensions into it) carries it, so a
failure to connect for the redirect is known to follow a request that was sent."""

_BEFORE_SENDING = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures to get a connection (refused, unreachable, a name that does not resolve, a TLS
handshake refused, none within the timeout or from the pool): nothing of the request was
written."""


def never_sent(err: BaseException) -> bool:
    """Whether the request ``err`` (or the first HTTP failure among its causes) ended
    provably never left the worker, nor any request before it in its redirects: a
    connection the egress policy refused (``EgressDenied``) or that was never made
    (``_BEFORE_SENDING``) for the request itself, not for a redirect of it. False for
    anything else: the request may have reached the server."""
    link: BaseException | None = err
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, EgressDenied):
            return not link.redirected
        if isinstance(link, httpx.HTTPError):
            if not isinstance(link, _BEFORE_SENDING):
                return False
            try:
                request = link.request
            except RuntimeError:  # raised without its request: not known
                return False
            return not request.extensions.get(ANSWERED)
        link = link.__cause__ or link.__context__
    return False
