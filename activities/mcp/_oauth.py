"""MCP servers behind OAuth 2.1: the ``client_credentials`` grant, through the SDK.

The SDK's ``ClientCredentialsOAuthProvider`` (an ``httpx2.Auth``) does all of OAuth:
protected-resource and authorization-server metadata discovery, the issuer checks, the
token request with the resource indicator, and a new token on a 401. It is attached to the
session's own httpx2 client, which the worker's ``Egress`` made, so every request of the
flow (metadata, token endpoint) goes through the egress policy like the MCP requests.

What this module adds: which secret and which authorization server (the operator names
the issuer each client secret belongs to, ``McpSettings.oauth_issuers``: a Spec, or a
model spawning one, must not be able to send a client secret to a server it chose), and
where the token lives (``StoredTokens``: the worker's ``TokenStore``, keyed by the Run's
Scope, the issuer, the client id and the resource). Tokens and the secret never enter a
payload, record, blob or log line; each token the worker holds is redacted from what the
server sends back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx2
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)
from mcp.shared.auth_utils import resource_url_from_server_url
from pydantic import BaseModel, ValidationError

from psych_runtime.activities.egress import Egress
from psych_runtime.activities.mcp._consent import ConsentProvider, Consents
from psych_runtime.activities.mcp._held import HeldRedactor, TokensHeld
from psych_runtime.activities.mcp._registering import Registering, client_refused
from psych_runtime.activities.mcp._registration import (
    dynamic_client_id,
    forget_registration,
    is_dynamic,
    keep_registration,
    read_registration,
    registration_key,
    registration_of,
)
from psych_runtime.activities.mcp._stored_registration import put_back
from psych_runtime.activities.mcp._told import ForServer
from psych_runtime.activities.secrets import Redactor, SecretResolver, resolve_secret
from psych_runtime.activities.tokens import TokenKey, TokenStore
from psych_runtime.specs import McpServer, NotFound, Scope

_log = logging.getLogger(__name__)


class OAuthUnavailable(Exception):
    """A server's OAuth cannot be used for this Scope (the message names why, never a
    secret or token)."""


class _Record(BaseModel):
    """A stored token record: the key it was stored under, the token, when it expires,
    and the metadata of the authorization server that issued it (``authorization_code``:
    where a refresh goes before anything was discovered again); for a dynamically
    registered client, the client it was issued to (what a refresh authenticates as)."""

    key: tuple[str, str | None, str, str, str]
    token: OAuthToken
    expires_at: float | None
    metadata: OAuthMetadata | None = None
    client: OAuthClientInformationFull | None = None


def _fields(key: TokenKey) -> tuple[str, str | None, str, str, str]:
    return (key.tenant, key.principal, key.issuer, key.client_id, key.resource)


DAMAGED = "damaged: cut short, or not a token record"
MIXED_UP = "it names another key: the store mixed records up"


def _record_of(data: bytes, key: TokenKey) -> _Record | str:
    """The token record ``data`` stored under ``key``, or why it cannot be used
    (``DAMAGED``, ``MIXED_UP``)."""
    try:
        record = _Record.model_validate_json(data)
    except ValidationError:
        return DAMAGED
    return MIXED_UP if record.key != _fields(key) else record


def unreadable(data: bytes, key: TokenKey) -> str | None:
    """Why the token record ``data`` stored under ``key`` cannot be used (a flow ignores
    it as if absent), or None when it can."""
    record = _record_of(data, key)
    return record if isinstance(record, str) else None


class StoredTokens(TokenStorage):
    """The SDK's ``TokenStorage`` for one ``TokenKey``, over the worker's ``TokenStore``.

    ``store`` None keeps the token in this object only (a publish-time check, which must
    leave nothing behind). A record is written with its key and the absolute time it
    expires: one read under another key (a store that mixed records up) is ignored, and an
    expired token with nothing to refresh it is not handed out (the provider then asks for
    a new one at once instead of sending a dead one first).

    ``registration``: where a dynamically registered client is kept (``_registration``);
    the client comes from the token record (the one its token was issued to), else from
    there, and the one the SDK registers is stored there (``registering``: the flow's
    registration, deleted at the server when another was stored first).
    """

    def __init__(
        self,
        store: TokenStore | None,
        key: TokenKey,
        held: TokensHeld,
        client: OAuthClientInformationFull | None = None,
        registration: TokenKey | None = None,
        registering: Registering | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self._held = held.holder(key)
        self.client = client
        self.registration = registration
        self.registering = registering
        if registering is not None and store is not None and registration is not None:
            # A client the flow drops whose deletion failed for now: kept for a later try.
            registering.keep = lambda dropped: put_back(store, registration, [dropped], registering)
        self.metadata: OAuthMetadata | None = None
        """The issuing server's metadata, read with the token (or set before storing it)."""
        self._memory: bytes | None = None

    async def _read(self) -> bytes | None:
        if self.store is None:
            return self._memory
        return await self.store.get(self.key)

    async def get_tokens(self) -> OAuthToken | None:
        """The token held for the key, with ``expires_in`` counted from now."""
        data = await self._read()
        if data is None:
            return None
        record = _record_of(data, self.key)
        if isinstance(record, str):
            # Cut short by a crash of a store that did not sync, or written by hand: as if
            # absent, so the next token the flow gets replaces it (not a failure each use).
            if record == DAMAGED:
                _log.warning("the token record of %r is unreadable: ignored", self.key)
            else:
                _log.warning("a token record under %r names another key: ignored", self.key)
            return None
        token = record.token
        self.metadata = self.metadata or record.metadata
        # A registered client's token is refreshed as the client it was issued to, also
        # when another worker stored it, with another registration, since this one's.
        self._client(record.client or self.client)
        self._held.saw(token)
        if record.expires_at is None:
            return token
        left = int(record.expires_at - time.time())
        if left <= 0 and token.refresh_token is None:
            return None
        return token.model_copy(update={"expires_in": max(left, 0)})

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Store ``tokens`` for the key (a refreshed token replaces the old one)."""
        self._held.saw(tokens)
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        data = _Record(
            key=_fields(self.key),
            token=tokens,
            expires_at=expires_at,
            metadata=self.metadata,
            client=self.client if is_dynamic(self.key) else None,
        )
        encoded = data.model_dump_json().encode()
        if self.store is None:
            self._memory = encoded
        else:
            await self.store.put(self.key, encoded)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The configured client (the Spec's client id or client-id metadata document URL,
        the operator's secret), the dynamically registered one (its token's, else the
        stored registration), or None (client credentials: the provider knows it; a
        dynamic client not registered yet: the provider registers it)."""
        if self.client is None and self.registration is not None and self.store is not None:
            self._client(await read_registration(self.store, self.registration))
        return self.client

    async def set_client_info(
        self, client_info: OAuthClientInformationFull, replacing: str | None = None
    ) -> None:
        """Keeps a client-id metadata document's client (derived from the Spec, nothing to
        store) or stores a dynamic registration, in place of ``replacing``'s if given (one
        stored first by another worker stands and is used instead); refuses a registration
        for a client the Spec names (``ConsentProvider`` refuses it before it is sent)."""
        if client_info.client_id == self.key.client_id:
            self.client = client_info
            return
        if self.registration is None:
            raise OAuthUnavailable(
                "a client was registered dynamically for a server whose Spec names its "
                "client (oauth.preregistered_client_id or oauth.cimd_url): refused"
            )
        if self.store is not None:
            client_info = await keep_registration(
                self.store, self.registration, client_info, self.registering, replacing
            )
        self._client(client_info)

    async def forgot(self, client: OAuthClientInformationFull, response: httpx2.Response) -> bool:
        """Whether the token endpoint's ``response`` refused the registered ``client``
        (``invalid_client``: the authorization server lost or expired it). Then it is not
        used again: its registration and the token issued to it are forgotten (unless
        another worker replaced either since); the client is then the one another worker
        registered since, if any, else none (the flow registers one)."""
        if self.registration is None or not await client_refused(response):
            return False
        client_id = client.client_id
        if self.client is not None and self.client.client_id == client_id:
            self.client = None
        if self.store is None:
            return True
        now = time.time() if self.registering is None else self.registering.clock()
        await forget_registration(self.store, self.registration, client_id, now)

        def issued_to_it(data: bytes | None) -> bytes | None:
            try:
                record = None if data is None else _Record.model_validate_json(data)
            except ValidationError:
                return data
            held = None if record is None or record.client is None else record.client.client_id
            return None if held == client_id else data

        await self.store.update(self.key, issued_to_it)
        self._client(await read_registration(self.store, self.registration))
        return True

    def _client(self, client: OAuthClientInformationFull | None) -> None:
        """Use ``client``; a registered client's secret is redacted like the tokens."""
        self.client = client
        if client is not None and is_dynamic(self.key):
            self._held.secret = client.client_secret or ""


@dataclass(frozen=True)
class Grant:
    """How a session authenticates to an OAuth server for one Scope.

    Attributes:
        auth: the SDK's provider, attached to the session's httpx2 client.
        identity: what tells this client identity apart in the pool key (hashed there):
            the issuer, client id and secret.
        redact: cleans the secret and every token held for the key from what the
            server sends back (tokens obtained after it was made included).
    """

    auth: httpx2.Auth
    identity: str
    redact: Redactor
    key: TokenKey | None = None
    """The key the grant's token is kept under."""


class OAuthClients:
    """The worker's OAuth side: its issuers, its token store and the tokens it holds.

    Args:
        issuers: client secret credential name -> issuer URL of the authorization server
            that secret belongs to (``McpSettings.oauth_issuers``).
        store: where tokens are kept (None: in each session only, as a check does).
        registers: whether a client is registered dynamically when one is needed; False
            (a publish-time check): the flow stops there, its key in ``unregistered``
            (a person must consent after the first Run registers it).
        egress: the worker's egress port, through which a registration left unused is
            deleted (default: one from the environment).
    """

    def __init__(
        self,
        issuers: Mapping[str, str],
        store: TokenStore | None,
        *,
        registers: bool = True,
        egress: Egress | None = None,
    ) -> None:
        self.issuers = dict(issuers)
        self.store = store
        self.egress = egress if egress is not None else Egress()
        self.held = TokensHeld()
        self.consents = Consents(store, {})
        self.unregistered: set[TokenKey] | None = None if registers else set()

    def tokens(
        self,
        key: TokenKey,
        client: OAuthClientInformationFull | None = None,
        metadata: OAuthMetadata | None = None,
    ) -> StoredTokens:
        """The SDK's storage of ``key`` over this worker's store (a registered client's
        knows where its registration is kept: an exchange refused ``invalid_client``
        forgets it)."""
        storage = StoredTokens(self.store, key, self.held, client, registration_of(key))
        storage.metadata = metadata
        return storage

    async def grant(self, server: McpServer, scope: Scope, secrets: SecretResolver | None) -> Grant:
        """The provider for ``server`` under ``scope``.

        Raises:
            OAuthUnavailable: no client id or secret credential, no issuer configured for
                it, or a secret that cannot be resolved (messages name the credential,
                never its value).
        """
        oauth = server.oauth
        assert oauth is not None
        if oauth.grant == "authorization_code":
            return await consent_grant(self, server, scope, secrets)
        client_id = oauth.preregistered_client_id
        credential = oauth.client_secret_credential
        if client_id is None or credential is None:
            raise OAuthUnavailable(
                "client_credentials needs oauth.preregistered_client_id and "
                "oauth.client_secret_credential"
            )
        issuer = self.issuer_of(credential)
        secret = await self.secret(scope, credential, secrets)
        key = TokenKey(
            tenant=scope.tenant,
            principal=scope.principal,
            issuer=issuer,
            client_id=client_id,
            resource=resource_url_from_server_url(server.url),
        )
        provider = ClientCredentialsOAuthProvider(
            server_url=server.url,
            storage=StoredTokens(self.store, key, self.held),
            client_id=client_id,
            client_secret=secret,
            issuer=issuer,
        )
        auth = ForServer(provider, server.name)
        redact = HeldRedactor({credential: secret}, self.held, key)
        identity = f"oauth\0{issuer}\0{client_id}\0{secret}"
        return Grant(auth=auth, identity=identity, redact=redact, key=key)

    def issuer_of(self, name: str, kind: str = "credential") -> str:
        """The issuer the operator configured for ``name`` (``kind`` "credential": a client
        secret credential; "client": a public client's id; "MCP server": the URL of a
        server whose client is registered dynamically).

        Raises:
            OAuthUnavailable: none is configured.
        """
        issuer = self.issuers.get(name)
        if issuer is None:
            raise OAuthUnavailable(
                f"no authorization server is configured for {kind} {name!r} (McpSettings."
                "oauth_issuers, PSYCH_MCP_OAUTH_ISSUERS): a client's credentials and tokens "
                "only go to the issuer the operator names for it"
            )
        return issuer

    async def secret(self, scope: Scope, credential: str, secrets: SecretResolver | None) -> str:
        """The client secret ``credential`` names for ``scope``.

        Raises:
            OAuthUnavailable: no resolver, or no such secret.
        """
        if secrets is None:
            raise OAuthUnavailable(
                f"credential {credential!r} cannot be resolved: this worker has no SecretResolver"
            )
        try:
            return await resolve_secret(secrets, scope, credential)
        except NotFound as err:
            raise OAuthUnavailable(f"credential {credential!r} is not available") from err


async def consent_grant(
    clients: OAuthClients, server: McpServer, scope: Scope, secrets: SecretResolver | None
) -> Grant:
    """The ``authorization_code`` provider for ``server`` under ``scope`` (``_consent``).

    The client is the Spec's ``preregistered_client_id`` (confidential when
    ``client_secret_credential`` names its secret) or its ``cimd_url`` (a client-id
    metadata document, when the authorization server supports them); with neither, and
    ``allow_dynamic_registration``, one the SDK registers with the authorization server
    (``_registration``: once per tenant, server and client metadata, kept in the store).
    The issuer is the one the operator configured for the secret credential, else for the
    client id, else (a registered client) for the MCP server's URL.

    Raises:
        OAuthUnavailable: no client or redirect URI, no issuer configured, or a secret
            that cannot be resolved.
    """
    oauth = server.oauth
    assert oauth is not None
    named_client = oauth.preregistered_client_id or oauth.cimd_url
    dynamic = named_client is None
    if dynamic and not oauth.allow_dynamic_registration:
        raise OAuthUnavailable(
            "authorization_code needs oauth.preregistered_client_id or oauth.cimd_url: "
            "oauth.allow_dynamic_registration is false, so no client is registered"
        )
    if not oauth.redirect_uris:
        raise OAuthUnavailable(
            "authorization_code needs oauth.redirect_uris (where the operator's OAuth "
            "callback listens: psych oauth-callback, or psych serve's /oauth/callback)"
        )
    credential = oauth.client_secret_credential
    if dynamic and credential is not None:
        raise OAuthUnavailable(
            "oauth.client_secret_credential names the secret of oauth.preregistered_client_id: "
            "a dynamically registered client gets its own from the registration"
        )
    if credential is not None:
        issuer = clients.issuer_of(credential)
    elif named_client is None:
        issuer = clients.issuer_of(server.url, "MCP server")
    else:
        issuer = clients.issuer_of(named_client, "client")
    secret = None if credential is None else await clients.secret(scope, credential, secrets)
    metadata = OAuthClientMetadata.model_validate(
        {
            "redirect_uris": list(oauth.redirect_uris),
            "client_name": oauth.client_name,
            "application_type": oauth.application_type,
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none" if secret is None else "client_secret_post",
        }
    )
    client_id = named_client or dynamic_client_id(metadata)
    client = None
    if oauth.preregistered_client_id is not None:
        client = OAuthClientInformationFull.model_validate(
            {
                **metadata.model_dump(mode="json", exclude_none=True),
                "client_id": oauth.preregistered_client_id,
                "client_secret": secret,
            }
        )
    resource = resource_url_from_server_url(server.url)
    key = TokenKey(
        tenant=scope.tenant,
        principal=scope.principal,
        issuer=issuer,
        client_id=client_id,
        resource=resource,
    )
    registration = registration_key(scope.tenant, issuer, resource, metadata) if dynamic else None
    registering = Registering(clients.egress, scope.tenant, server.name, issuer)
    storage = StoredTokens(
        clients.store, key, clients.held, client, registration, registering if dynamic else None
    )
    provider = ConsentProvider(
        server_url=server.url,
        client_metadata=metadata,
        storage=storage,
        client_metadata_url=None if oauth.preregistered_client_id else oauth.cimd_url,
        issuer=issuer,
        key=key,
        parked=clients.consents.saw,
        dynamic=dynamic,
        unregistered=clients.unregistered,
    )
    auth = ForServer(provider, server.name)
    named = {} if credential is None or secret is None else {credential: secret}
    redact = HeldRedactor(named, clients.held, key)
    identity = f"oauth\0{issuer}\0{client_id}\0{secret or ''}"
    return Grant(auth=auth, identity=identity, redact=redact, key=key)
