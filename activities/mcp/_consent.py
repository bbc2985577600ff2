"""MCP servers behind OAuth 2.1 with a person's consent: the ``authorization_code`` grant.

The SDK's ``OAuthClientProvider`` runs the whole grant in one coroutine: discovery, the
authorization URL (PKCE, ``state``, resource indicator), then it awaits the redirect's
callback and exchanges the code. A Run cannot keep a coroutine across a person's consent
(minutes to days, worker restarts in between), so the grant is split at the callback:

1. ``ConsentProvider`` (the SDK's provider) runs discovery and builds the URL as usual; at
   the point where it would wait for the callback it hands the flow (its context, the
   PKCE verifier and ``state``) to ``OAuthClients`` and fails the request.
2. The activity that saw the failure parks the flow (``Consents.park``): sealed in the
   token store under the Run's Scope (the verifier never enters history or a log), plus an
   index from ``state`` to the Run's workflow id and the pending item's id, which the
   callback needs. It raises ``McpConsentRequired``; the Run suspends for authorization.
3. The callback (``psych oauth-callback``, ``psych serve``, or ``oauth_callback_app``)
   finds the Run by ``state``, checks the redirect's RFC 9207 ``iss`` against the
   authorization server the index names (a code or a refusal of another server is not
   taken: the wait goes on), leaves the code in the store and resumes the Run
   (``_consent_callback``; a refusal the authorization server sent instead ends the wait
   with it).
4. The Run's ``psych.mcp.authorize`` activity exchanges the code with the SDK's own
   token request of the parked flow (the same context, verifier, client and resource),
   checks ``state`` and the RFC 9207 ``iss``, stores the token under the Scope and
   forgets the flow; then the Run retries what needed the token.

The exchange runs inside the Run's activity, not in the callback: there the token store is
sealed for the Run's tenant with the payload keys, and the request goes through the
tenant's egress policy. The authorization code is single use and worthless without the
verifier, and waits in the store (not in history) only until that activity takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import issuers_match, validate_authorization_response_iss
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    ProtectedResourceMetadata,
)
from pydantic import BaseModel
from temporalio import activity

from psych_runtime.activities.egress import PURPOSE, EgressDenied, Purpose
from psych_runtime.activities.mcp._consent_callback import (
    Arrived,
    ExpectedIss,
    Waiting,
    arrived_key,
    index_key,
)
from psych_runtime.activities.mcp._consent_error import McpConsentRequired
from psych_runtime.activities.mcp._registration import refuse_unregistrable, still_known
from psych_runtime.activities.mcp._told import (
    ConsentNeeded,
    malformed_token_response,
    unparked,
)
from psych_runtime.activities.mcp._until import until_set
from psych_runtime.activities.tokens import TokenKey, TokenStore, unsealed

_log = logging.getLogger(__name__)

T = TypeVar("T")

_DEFERRED = "psych:deferred"
"""What the split grant's callback answers in place of a code (never sent anywhere: the
provider stops before the exchange)."""

REFRESH_POLL_SECONDS = 0.1
"""How often a refused refresh asks the store again (``ConsentProvider``)."""


class Flow(BaseModel):
    """An authorization waiting for its callback: what the exchange needs (sealed)."""

    key: tuple[str, str | None, str, str, str]
    url: str
    state: str
    verifier: str
    server_url: str
    client_metadata: OAuthClientMetadata
    client_info: OAuthClientInformationFull
    oauth_metadata: OAuthMetadata | None
    protected_resource: ProtectedResourceMetadata | None
    protocol_version: str | None
    server: str | None = None
    """The MCP server's name in the Spec (set when parked; a refusal of the exchange names
    it)."""


def token_key(fields: tuple[str, str | None, str, str, str]) -> TokenKey:
    return TokenKey(*fields)


def flow_key(tenant: str, principal: str | None, id: str) -> TokenKey:
    """Where a Run's parked flow is kept (sealed for its tenant)."""
    return TokenKey(tenant, principal, "psych:consent", "flow", id)


class ConsentProvider(OAuthClientProvider):
    """The SDK's authorization-code provider, stopped where it would wait for a person.

    Args:
        issuer: the authorization server the operator configured for this client; a
            server that names another one is refused (its tokens never reach us, ours
            never reach it).
        parked: called with the flow when the person's consent is needed.
        dynamic: the client may be registered (``_registration``; the storage's
            ``registering`` reads the answer); otherwise the SDK's registration request is
            refused before it is sent.
        unregistered: None, or (a publish-time check, which registers no client) where
            the key goes when the flow stops at the registration instead.
    """

    refresh_settle_seconds = 2.0
    """How long a refused refresh waits for another worker's refreshed token to be stored
    before it asks for a person's consent."""

    def __init__(
        self,
        *,
        server_url: str,
        client_metadata: OAuthClientMetadata,
        storage: Any,
        client_metadata_url: str | None,
        issuer: str,
        key: TokenKey,
        parked: Callable[[Flow], None],
        dynamic: bool = False,
        unregistered: set[TokenKey] | None = None,
    ) -> None:
        self._url: str | None = None
        super().__init__(
            server_url=server_url,
            client_metadata=client_metadata,
            storage=storage,
            redirect_handler=self._redirect,
            callback_handler=self._deferred,
            client_metadata_url=client_metadata_url,
        )
        self.storage = storage
        self.issuer = issuer
        self.key = key
        self.parked = parked
        self.dynamic = dynamic
        self.unregistered = unregistered

    async def _initialize(self) -> None:
        await super()._initialize()
        context = self.context
        # A held token's expiry and its issuer's endpoints, from the stored record: the
        # SDK would otherwise send an expired token first (no expiry known) and send a
        # refresh to the resource server's origin (no metadata discovered yet).
        metadata = getattr(context.storage, "metadata", None)
        if context.oauth_metadata is None and isinstance(metadata, OAuthMetadata):
            context.oauth_metadata = metadata
        if context.current_tokens is not None:
            context.update_token_expiry(context.current_tokens)

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        # Another worker may have refreshed this key since this session read its token: a
        # rotated refresh token is good once (reusing it can make the server revoke the
        # new one too), and its new token may need no refresh at all. So a session whose
        # token is no longer valid takes what the store holds now, before the SDK decides.
        if self._initialized and not self.context.is_token_valid():
            await self._adopt_stored()
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                registering = outgoing is not request and self._registering(outgoing)
                response = yield outgoing
                if registering:  # refused, or what its answer offers kept (``Registering``)
                    await self.storage.registering.answered(response)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()  # a refusal raised here leaves the SDK's flow (its lock) open

    def _registering(self, outgoing: httpx2.Request) -> bool:
        """Whether ``outgoing``, a request of the SDK's flow (not the MCP one), is its
        registration request (the one it posts while it holds no client); refused before
        it is sent unless allowed."""
        if self.context.client_info is not None or outgoing.method != "POST":
            return False
        refuse_unregistrable(self.context.oauth_metadata, self.issuer, self.dynamic)
        if self.unregistered is not None:
            self.unregistered.add(self.key)
            raise OAuthFlowError("a client is registered before consent: a check registers none")
        return True

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        held = self.context.current_tokens
        client = self.context.client_info
        if await super()._handle_refresh_response(response):
            return True
        # Refused: another worker may have refreshed in the meantime (it stored the new
        # token after this one read the store). A valid stored token is then this
        # session's too, not a consent to ask a person for again. Two workers whose
        # tokens expired together refresh together: the server takes one and refuses the
        # other, which may hear so before the one taken has stored its token. So the
        # store is asked again for a moment before the refusal stands (the session's
        # requests wait meanwhile, as they wait for any refresh). Cancelled meanwhile, the
        # session keeps no token: never the spent refresh token again.
        deadline = time.monotonic() + self.refresh_settle_seconds
        try:
            while True:
                self.context.current_tokens = held
                if await self._adopt_stored() and self.context.is_token_valid():
                    return True
                if time.monotonic() >= deadline:
                    break
                await asyncio.sleep(REFRESH_POLL_SECONDS)
        except BaseException:
            self.context.clear_tokens()
            raise
        self.context.clear_tokens()
        # A registered client the server no longer knows: another one (registered since,
        # else by the flow).
        if self.dynamic and client is not None and await self.storage.forgot(client, response):
            self.context.client_info = self.storage.client
        return False

    async def _adopt_stored(self) -> bool:
        """Take the stored token if it is not the one this session holds; whether it did."""
        held = self.context.current_tokens
        stored = await self.context.storage.get_tokens()
        if stored is None or held is None:
            return False
        if (stored.access_token, stored.refresh_token) == (held.access_token, held.refresh_token):
            return False
        self.context.current_tokens = stored
        self.context.update_token_expiry(stored)
        if self.dynamic and self.storage.client is not None:  # the client it was issued to
            self.context.client_info = self.storage.client
        return True

    def _select_authorization_server(self, advertised: list[str]) -> str:
        for server in advertised:
            if issuers_match(server, self.issuer):
                return server
        raise OAuthFlowError(
            f"the MCP server names authorization server(s) {', '.join(advertised)}, not "
            f"{self.issuer}, the issuer configured for this client: refused"
        )

    def _expected_issuer(self) -> str:
        # A server with no protected-resource metadata (the SDK's 2025-03-26 path, which
        # never asks ``_select_authorization_server``) makes its own origin the issuer:
        # refused, before its metadata is read, unless that is the configured one.
        expected = super()._expected_issuer()
        if not issuers_match(expected, self.issuer):
            raise OAuthFlowError(
                f"the MCP server names no authorization server (no protected-resource "
                f"metadata), so its own origin {expected} would be used, not {self.issuer}, "
                "the issuer configured for this client: refused"
            )
        return expected

    async def _redirect(self, url: str) -> None:
        self._url = url

    async def _deferred(self) -> AuthorizationCodeResult:
        # The SDK checks the callback's state and iss before it returns the verifier: the
        # state is the URL's own, and the iss the one the metadata names, so both pass;
        # the code is never used (``_perform_authorization`` stops before the exchange).
        assert self._url is not None
        state = parse_qs(urlsplit(self._url).query).get("state", [""])[0]
        metadata = self.context.oauth_metadata
        iss = None
        if metadata is not None and metadata.authorization_response_iss_parameter_supported:
            iss = str(metadata.issuer)
        return AuthorizationCodeResult(code=_DEFERRED, state=state, iss=iss)

    async def _perform_authorization(self) -> httpx2.Request:
        context = self.context
        if (why := unparked()) is not None:  # parked, a consent would rerun a call that
            self._initialized = False  # ran, or be one of no call (12-07); the next asks it
            raise OAuthFlowError(why)
        if self.dynamic and self.storage.client is not None:
            # The stored registration: another worker's, when it was stored before this
            # flow's own (``keep_registration``), which the SDK's context still holds;
            # one the authorization server forgot is replaced (``still_known``).
            context.client_info = self.storage.client
            if self.unregistered is None:  # a publish-time check writes nothing
                context.client_info = await still_known(self, self.storage)
        _, verifier = await self._perform_authorization_code_grant()
        assert self._url is not None and context.client_info is not None
        state = parse_qs(urlsplit(self._url).query)["state"][0]
        self.parked(
            Flow(
                key=(
                    self.key.tenant,
                    self.key.principal,
                    self.key.issuer,
                    self.key.client_id,
                    self.key.resource,
                ),
                url=self._url,
                state=state,
                verifier=verifier,
                server_url=context.server_url,
                client_metadata=context.client_metadata,
                client_info=context.client_info,
                oauth_metadata=context.oauth_metadata,
                protected_resource=context.protected_resource_metadata,
                protocol_version=context.protocol_version,
            )
        )
        # The token comes into the store through another provider (the Run's exchange):
        # this one reads it again before its next request instead of sending the old one.
        self._initialized = False
        raise ConsentNeeded("a person's consent is needed (the Run suspends for it)")


class Asker:
    """One activity's requests (``asking``) and the flows parked for them: the SDK runs a
    request's OAuth flow in its asker's context (as ``_lease.TOLD`` relies on), so such a
    flow's request was not sent, or refused (401/403) before it reached the tool."""

    def __init__(self) -> None:
        self.flows: dict[TokenKey, Flow] = {}
        self.needed = asyncio.Event()  # one of them needs consent (``unless_needed``)


_ASKER: ContextVar[Asker | None] = ContextVar("psych_mcp_consent_asker", default=None)
"""Whose requests run in this context; a session's owner task keeps its opener's."""


@contextlib.contextmanager
def asking() -> Iterator[Asker]:
    """Requests made inside are one asker's: a consent their flows need is theirs only
    (until 12-07 it was the key's, taken by any call of it: docs/decisions)."""
    token = _ASKER.set(asker := Asker())
    try:
        yield asker
    finally:
        _ASKER.reset(token)


@dataclass
class Consents:
    """Flows waiting for a person, between the provider and the activity that parks them:
    an asker's (``asking``) only it takes; ``needed`` holds, by ``TokenKey``, those of
    requests made outside any asker (a publish-time check, ``_connect.py``)."""

    store: TokenStore | None
    needed: dict[TokenKey, Flow]

    def saw(self, flow: Flow) -> None:
        key = token_key(flow.key)
        asker = _ASKER.get()
        if asker is None:
            self.needed[key] = flow
            return
        asker.flows[key] = flow
        asker.needed.set()

    def take(self, key: TokenKey | None) -> Flow | None:
        """The flow a failed request of ``key`` made in this context left, if any (taken
        once); never another asker's."""
        if key is None:
            return None
        asker = _ASKER.get()
        return (self.needed if asker is None else asker.flows).pop(key, None)

    async def unless_needed(self, work: Awaitable[T]) -> T:
        """``work``, unless a flow of this context's own requests needs consent first: then
        it is cancelled and ``ConsentInterrupted`` raised (the caller takes the flow). A
        call of the same key waiting on its own answer is not stopped by another's need."""
        asker = _ASKER.get()
        if asker is None:
            return await work
        task = await until_set(work, asker.needed)
        if task.cancelled():
            raise ConsentInterrupted
        return task.result()

    async def park(self, flow: Flow, server: str, workflow_id: str) -> McpConsentRequired:
        """Keep ``flow`` for its callback; the exception the activity raises for it."""
        if self.store is None:
            return McpConsentRequired(server, flow.url, "")
        pending = "oauth-" + secrets.token_hex(8)
        tenant, principal = flow.key[0], flow.key[1]
        named = flow.model_copy(update={"server": server})
        await self.store.put(flow_key(tenant, principal, pending), named.model_dump_json().encode())
        metadata = flow.oauth_metadata
        iss = ExpectedIss(
            issuer=None if metadata is None else str(metadata.issuer),
            required=metadata is not None
            and bool(metadata.authorization_response_iss_parameter_supported),
        )
        waiting = Waiting(workflow_id=workflow_id, tenant=tenant, id=pending, iss=iss)
        await unsealed(self.store).put(index_key(flow.state), waiting.model_dump_json().encode())
        return McpConsentRequired(server, flow.url, pending)


class ConsentInterrupted(Exception):
    """A request was given up: a person's consent is needed first (``Consents``)."""


async def exchange(
    store: TokenStore,
    tenant: str,
    principal: str | None,
    id: str,
    send: Callable[[httpx2.Request], Awaitable[httpx2.Response]],
    storage: Callable[[TokenKey, OAuthClientInformationFull, OAuthMetadata | None], Any],
) -> str | None:
    """Exchange the code the callback left for pending item ``id``; None when the token
    is stored, else why not (no secret in it: nor of a malformed token response, which
    the SDK's message would quote). The request is the SDK's own token request of the
    parked flow (``send`` delivers it through the Run's egress client); its response is
    the SDK's to read, which stores the token through ``storage(key, client)``. The flow,
    its index and the code are forgotten either way: a failed exchange needs a new consent.
    """
    flow_at = flow_key(tenant, principal, id)
    sealed = await store.get(flow_at)
    if sealed is None:
        return "no authorization is waiting under this id (already exchanged, or expired)"
    flow = Flow.model_validate_json(sealed)
    arrived_at = arrived_key(id)
    raw = await unsealed(store).get(arrived_at)
    try:
        if raw is None:
            return "the authorization callback has not arrived"
        arrived = Arrived.model_validate_json(raw)
        if not secrets.compare_digest(arrived.state, flow.state):
            return "the callback's state does not match the authorization's"
        validate_authorization_response_iss(arrived.iss, flow.oauth_metadata)
        tokens = storage(token_key(flow.key), flow.client_info, flow.oauth_metadata)
        provider = OAuthClientProvider(
            server_url=flow.server_url, client_metadata=flow.client_metadata, storage=tokens
        )
        context = provider.context
        context.client_info = flow.client_info
        context.oauth_metadata = flow.oauth_metadata
        context.protected_resource_metadata = flow.protected_resource
        context.protocol_version = flow.protocol_version
        # The SDK's token-exchange helpers of the provider: the request (code, verifier,
        # redirect URI, client authentication, resource) and reading its answer (a
        # registered client the server no longer knows is forgotten: the next flow asks anew).
        request = await provider._exchange_token_authorization_code(arrived.code, flow.verifier)
        request.extensions = {**request.extensions, PURPOSE: _purpose(flow)}
        response = await send(request)
        await tokens.forgot(flow.client_info, response)
        await provider._handle_token_response(response)
        return None
    except (OAuthFlowError, EgressDenied) as err:
        return malformed_token_response(err) or str(err)
    except Exception as err:
        _log.warning("the authorization code exchange failed: %s", type(err).__name__)
        return f"the authorization code exchange failed ({type(err).__name__})"
    finally:
        # The index first: a callback that wrote its code after this (``_consent_callback``)
        # finds the index gone and deletes the code itself; one that wrote it before has it
        # deleted here.
        await unsealed(store).delete(index_key(flow.state))
        await store.delete(flow_at)
        await unsealed(store).delete(arrived_at)


def _purpose(flow: Flow) -> Purpose:
    """What the exchange's token request is for, as a refusal of it names it."""
    server = repr(flow.server) if flow.server is not None else f"at {flow.server_url}"
    return Purpose("mcp_oauth", f"the authorization server of MCP server {server}")


async def consent_needed(
    consents: Consents | None, key: TokenKey | None, server: str
) -> McpConsentRequired | None:
    """After a failed request on a connection of ``key``: the consent it needs, parked for
    the Run whose activity runs now (None: the failure was something else, or the consent
    is another asker's: ``asking``)."""
    flow = None if consents is None else consents.take(key)
    if flow is None or consents is None:
        return None
    workflow_id = activity.info().workflow_id or "" if activity.in_activity() else ""
    return await consents.park(flow, server, workflow_id)
