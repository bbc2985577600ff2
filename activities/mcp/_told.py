"""An MCP session's OAuth provider whose failures are told to the session's owner, and one
whose requests say whose authorization server they go to. A token store that did not
answer (``StoreUnavailable``) is told as it is.

The MCP SDK runs a session's requests, and so the OAuth flow of each, in a task of its own,
where an exception ends the session: the caller then sees only the SDK's "Connection
closed". ``ToldAuth`` tells the pool (``_pool.py``) of the failure as it is raised, so the
call's error and the server's unavailability say why: the token the authorization server
refused, and its answer. Likewise of a token the MCP server refused right after the flow
obtained it, where the SDK says only "Server returned an error response". A token store
failing the flow of a resumed event stream (``resuming``: the request it answers had left)
is told as a failed flow, not as the store's "nothing sent"; a consent such a flow needs is
parked for nobody (``unparked``: after it was given the Run would run the call again).
A flow failing for a request of the session's own (``standing``: the event stream the SDK
keeps open with a GET once the session is initialized, the DELETE ending it) is nobody's: it is
logged, not told (12-07: told as a resumed request's, "its request had been sent", and
kept as a reason the session might end for), as is the MCP server's refusal of the token
its flow just obtained (until 12-07 told as ``TokenRefused``, which a later lease told
nothing then quoted as why the session broke), and a consent it needs is parked for nobody
(``unparked``; until 12-07 it was the session's opener's, whose call it interrupted).

The request whose flow failed carries what was told of it (``flow_told``): a pooled
streamable-HTTP session's client then fails that request alone (``_posts.OnePostFails``),
a flow stopped for a person's consent (``ConsentNeeded``) too: its asker meets it as a
consent need (``_consent.asking``), other leases keep their answers (12-07: it ended the
session, and their answers with it).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextvars import ContextVar
from typing import TypeVar

import httpx2
from mcp.client.auth import OAuthFlowError, OAuthTokenError
from mcp.client.auth.utils import extract_field_from_www_auth
from pydantic import ValidationError

from psych_runtime.activities.egress import PURPOSE, Purpose
from psych_runtime.specs import StoreUnavailable

T = TypeVar("T")

_log = logging.getLogger(__name__)

_FLOW_OF: ContextVar[str | None] = ContextVar("psych_oauth_flow_of", default=None)
"""While a step of an OAuth flow runs: ``resumes`` (its request resumes an event stream),
``stands`` (its request is the session's own, ``standing``), or None."""

_STANDING = "psych_oauth_standing"
"""The request extension marking a request of the session's own (``stand``)."""

_TOLD = "psych_oauth_told"
"""The request extension ``ToldAuth`` sets on a request whose flow failed: the exception
that ended the flow, and what was told of it."""


class ConsentNeeded(OAuthFlowError):
    """A flow stopped for a person's consent (``_consent.py``): told and marked on its
    request (``flow_told``) as any failed flow; the flow parked is its asker's."""


class OAuthFailed(Exception):
    """What ``ToldAuth`` tells of a failed OAuth flow (the message names why)."""

    def __init__(self, message: str, *, unsent: bool = False) -> None:
        """``unsent``: the flow failed before it sent the request it was for, so that
        request never left the worker."""
        super().__init__(message)
        self.unsent = unsent


class TokenRefused(OAuthFailed):
    """What ``ToldAuth`` tells when the MCP server refused the token its flow had just
    obtained for the request (expired on arrival, for another audience or scope): the SDK
    then answers the request with only "Server returned an error response"."""


class _Forwarding(httpx2.Auth):
    """An OAuth provider that runs ``inner``'s flow, seeing each request it sends
    (``_sending``) and the exception that ends it (``_failed``)."""

    def __init__(self, inner: httpx2.Auth) -> None:
        self.inner = inner
        self.requires_request_body = inner.requires_request_body
        self.requires_response_body = inner.requires_response_body

    def _sending(self, request: httpx2.Request, sent: httpx2.Request) -> None:
        """``sent`` goes out in the flow of ``request``."""

    def _failed(self, request: httpx2.Request, err: Exception, unsent: bool) -> None:
        """The flow of ``request`` ends raising ``err``; ``unsent``: before it sent
        ``request`` itself."""

    def _answered(self, request: httpx2.Request, response: httpx2.Response, renewed: bool) -> None:
        """The flow of ``request`` ends with ``response`` to it; ``renewed``: the flow made
        requests of its own (discovery, the token endpoint) before it."""

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self.inner.async_auth_flow(request)
        answer: httpx2.Response | None = None
        renewed = False
        unsent = True
        of = "stands" if standing(request) else "resumes" if resuming(request) else None
        try:
            sent = await _stepped(flow.__anext__(), of)
            while True:
                self._sending(request, sent)
                unsent = unsent and sent is not request
                response = yield sent
                if sent is request:
                    answer = response
                else:
                    renewed = True
                sent = await _stepped(flow.asend(response), of)
        except StopAsyncIteration:
            if answer is not None:
                self._answered(request, answer, renewed)
            return
        except Exception as err:
            self._failed(request, err, unsent)
            raise
        finally:
            await flow.aclose()


class ToldAuth(_Forwarding):
    """An OAuth provider whose failures (a token the authorization server refused, its
    metadata unreadable) are told to ``told`` as they are raised: the SDK runs the flow in
    its own task, where a failure ends the session saying only "Connection closed"."""

    def __init__(self, inner: httpx2.Auth, told: Callable[[Exception], None]) -> None:
        super().__init__(inner)
        self.told = told

    def _failed(self, request: httpx2.Request, err: Exception, unsent: bool) -> None:
        told: Exception
        said = malformed_token_response(err) or (
            f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        )
        if standing(request):
            # No call's request, nor why the session would end: the SDK opens the stream
            # again once, then the session goes on without it (it hears no notifications).
            _log.warning(
                "getting an OAuth token for an MCP session's own event stream failed: %s",
                said,
            )
            return
        if isinstance(err, StoreUnavailable) and resuming(request):
            # The request whose stream it resumes had left (the tool may have run): not the
            # store's "nothing sent" (12-07: the call was retried as unsent).
            told = OAuthFailed(
                f"getting an OAuth token to resume an event stream failed: {err} (its request "
                "had been sent)"
            )
        elif isinstance(err, StoreUnavailable):
            # The worker's token store, not the server nor its authorization server: told
            # as it is, so the session's owner raises it (transient, ``_pool.py``).
            told = err
        else:
            told = OAuthFailed(f"getting an OAuth token failed: {said}", unsent=unsent)
        self.told(told)
        request.extensions = {**request.extensions, _TOLD: (err, told)}

    def _answered(self, request: httpx2.Request, response: httpx2.Response, renewed: bool) -> None:
        if response.status_code not in (401, 403) or not renewed:
            return
        error = extract_field_from_www_auth(response, "error")
        said = "" if error is None else f" ({error})"
        refused = (
            f"the MCP server refused the OAuth token just obtained for it: HTTP "
            f"{response.status_code}{said} (a token expired on arrival, or issued for "
            "another resource or scope)"
        )
        if standing(request):
            # The session's own stream's, as a failed flow of it (``_failed``; 12-07: told,
            # and kept as why the session ended, a later lease's error quoting it).
            _log.warning("%s, for an MCP session's own event stream", refused)
            return
        self.told(TokenRefused(refused))


def resuming(request: httpx2.Request) -> bool:
    """Whether ``request`` resumes an event stream (a streamable-HTTP GET carrying
    ``Last-Event-ID``): the SDK sends one when a request's stream dropped, the request
    itself sent."""
    return request.method == "GET" and "last-event-id" in request.headers


def stand(request: httpx2.Request) -> None:
    """Mark ``request`` as the session's own (``standing``): a pooled session's GET of its
    event stream or its DELETE, made in no lease (``_posts.OnePostFails``), no call's."""
    request.extensions = {**request.extensions, _STANDING: True}


def standing(request: httpx2.Request) -> bool:
    """Whether ``request`` is the session's own (``stand``)."""
    return bool(request.extensions.get(_STANDING, False))


def unparked() -> str | None:
    """Why a consent the OAuth flow running now (in this task, under a ``_Forwarding``)
    needs is parked for nobody (None: it is its asker's). Its request resumes an event
    stream (``resuming``): it had been sent, so its tool may have run, and after the
    consent the Run would run the call again. Or it is the session's own (``standing``):
    no call's. The key's next request asks for the consent."""
    of = _FLOW_OF.get()
    if of == "resumes":
        return (
            "a person's consent is needed to resume the event stream of a request already "
            "sent (the tool may have run; the next request asks for it)"
        )
    if of == "stands":
        return (
            "a person's consent is needed for the session's own event stream (no call's "
            "request; the next request asks for it)"
        )
    return None


async def _stepped(step: Awaitable[T], of: str | None) -> T:
    """One step of an inner flow, ``unparked`` reading ``of``."""
    token = _FLOW_OF.set(of)
    try:
        return await step
    finally:
        _FLOW_OF.reset(token)


def flow_told(request: httpx2.Request, err: BaseException) -> Exception | None:
    """What ``ToldAuth`` told of ``err``, when ``err`` ended ``request``'s OAuth flow
    (None: it did not)."""
    marked = request.extensions.get(_TOLD)
    if marked is None or marked[0] is not err:
        return None
    told: Exception = marked[1]
    return told


def malformed_token_response(err: Exception) -> str | None:
    """What is wrong with a token response the SDK could not read (its ``OAuthTokenError``
    raised while validating it), field by field and without the values: the SDK's own
    message quotes the response, and with it part of whatever credential it carries. Also
    the authorization-code exchange's (``_consent.exchange``)."""
    invalid = err.__context__
    if not isinstance(err, OAuthTokenError) or not isinstance(invalid, ValidationError):
        return None
    wrong = "; ".join(
        f"{'.'.join(map(str, error['loc'])) or 'response'}: {error['msg']}"
        for error in invalid.errors(include_url=False, include_input=False)
    )
    return f"the authorization server's token response is not an OAuth token response ({wrong})"


class ForServer(_Forwarding):
    """An OAuth provider whose own requests (discovery, the token endpoint) name the MCP
    server they are made for (the egress port's ``PURPOSE``): a refusal of the
    authorization server's host then says it was that server's authorization server, not
    only which host and rule (the SDK makes the requests inside its flow, where no caller
    of ours could say so)."""

    def __init__(self, inner: httpx2.Auth, server: str) -> None:
        super().__init__(inner)
        self.server = server

    def _sending(self, request: httpx2.Request, sent: httpx2.Request) -> None:
        if sent is not request:  # the flow's own request, not the MCP one
            sent.extensions = {**sent.extensions, PURPOSE: oauth_purpose(self.server, sent)}


def oauth_purpose(server: str, request: httpx2.Request) -> Purpose:
    """What an OAuth request of MCP server ``server`` is for, as a refusal names it."""
    if request.url.path.startswith("/.well-known/oauth-protected-resource"):
        return Purpose(
            "mcp_oauth", f"the OAuth protected-resource metadata of MCP server {server!r}"
        )
    return Purpose("mcp_oauth", f"the authorization server of MCP server {server!r}")
