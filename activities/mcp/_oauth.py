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
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.shared.auth_utils import resource_url_from_server_url
from pydantic import BaseModel

from psych_runtime.activities.secrets import Redactor, SecretResolver
from psych_runtime.activities.tokens import TokenKey, TokenStore
from psych_runtime.specs import McpServer, NotFound, Scope

_log = logging.getLogger(__name__)


class OAuthUnavailable(Exception):
    """A server's OAuth cannot be used for this Scope (the message names why, never a
    secret or token)."""


class _Record(BaseModel):
    """A stored token record: the key it was stored under, the token, when it expires."""

    key: tuple[str, str | None, str, str, str]
    token: OAuthToken
    expires_at: float | None


def _fields(key: TokenKey) -> tuple[str, str | None, str, str, str]:
    return (key.tenant, key.principal, key.issuer, key.client_id, key.resource)


class StoredTokens(TokenStorage):
    """The SDK's ``TokenStorage`` for one ``TokenKey``, over the worker's ``TokenStore``.

    ``store`` None keeps the token in this object only (a publish-time check, which must
    leave nothing behind). A record is written with its key and the absolute time it
    expires: one read under another key (a store that mixed records up) is ignored, and an
    expired token with nothing to refresh it is not handed out (the provider then asks for
    a new one at once instead of sending a dead one first).
    """

    def __init__(self, store: TokenStore | None, key: TokenKey, held: TokensHeld) -> None:
        self.store = store
        self.key = key
        self.held = held
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
        record = _Record.model_validate_json(data)
        if record.key != _fields(self.key):
            _log.warning("a token record under %r names another key: ignored", self.key)
            return None
        token = record.token
        self.held.saw(self.key, token)
        if record.expires_at is None:
            return token
        left = int(record.expires_at - time.time())
        if left <= 0 and token.refresh_token is None:
            return None
        return token.model_copy(update={"expires_in": max(left, 0)})

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Store ``tokens`` for the key (a refreshed token replaces the old one)."""
        self.held.saw(self.key, tokens)
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        data = _Record(key=_fields(self.key), token=tokens, expires_at=expires_at)
        encoded = data.model_dump_json().encode()
        if self.store is None:
            self._memory = encoded
        else:
            await self.store.put(self.key, encoded)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """None: a client-credentials client is configured (the Spec's client id and the
        operator's secret), never registered, so no client information is stored."""
        return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Refused: only configured clients are supported, so nothing registers one."""
        raise TypeError(
            "client registration is not supported: a client_credentials client is configured"
        )


class TokensHeld:
    """The access and refresh tokens this worker last held per key, for redaction only
    (what a server sends back is cleaned of them, as of a bearer credential)."""

    def __init__(self) -> None:
        self._held: dict[TokenKey, tuple[str, ...]] = {}

    def saw(self, key: TokenKey, token: OAuthToken) -> None:
        values = (token.access_token, token.refresh_token or "")
        self._held[key] = tuple(value for value in values if value)

    def of(self, key: TokenKey) -> tuple[str, ...]:
        return self._held.get(key, ())


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


class HeldRedactor(Redactor):
    """A ``Redactor`` that also redacts the tokens held for one key when it is used: a
    session gets its first token after the call's redactor was made."""

    def __init__(self, secrets: Mapping[str, str], held: TokensHeld, key: TokenKey) -> None:
        super().__init__(secrets)
        self.held = held
        self.key = key

    def __call__(self, text: str) -> str:
        for index, token in enumerate(self.held.of(self.key)):
            self.add(f"oauth-token-{index}", token)
        return super().__call__(text)


class OAuthClients:
    """The worker's OAuth side: its issuers, its token store and the tokens it holds.

    Args:
        issuers: client secret credential name -> issuer URL of the authorization server
            that secret belongs to (``McpSettings.oauth_issuers``).
        store: where tokens are kept (None: in each session only, as a check does).
    """

    def __init__(self, issuers: Mapping[str, str], store: TokenStore | None) -> None:
        self.issuers = dict(issuers)
        self.store = store
        self.held = TokensHeld()

    async def grant(self, server: McpServer, scope: Scope, secrets: SecretResolver | None) -> Grant:
        """The provider for ``server`` under ``scope``.

        Raises:
            OAuthUnavailable: a grant this worker does not implement, no client id or
                secret credential, no issuer configured for it, or a secret that cannot be
                resolved (messages name the credential, never its value).
        """
        oauth = server.oauth
        assert oauth is not None
        if oauth.grant != "client_credentials":
            raise OAuthUnavailable(f"the OAuth grant {oauth.grant!r} is not supported")
        client_id = oauth.preregistered_client_id
        credential = oauth.client_secret_credential
        if client_id is None or credential is None:
            raise OAuthUnavailable(
                "client_credentials needs oauth.preregistered_client_id and "
                "oauth.client_secret_credential"
            )
        issuer = self.issuers.get(credential)
        if issuer is None:
            raise OAuthUnavailable(
                f"no authorization server is configured for credential {credential!r} "
                "(McpSettings.oauth_issuers, PSYCH_MCP_OAUTH_ISSUERS): a client secret is "
                "only sent to the issuer the operator names for it"
            )
        if secrets is None:
            raise OAuthUnavailable(
                f"credential {credential!r} cannot be resolved: this worker has no SecretResolver"
            )
        try:
            secret = await secrets.resolve(scope, credential)
        except NotFound as err:
            raise OAuthUnavailable(f"credential {credential!r} is not available") from err
        key = TokenKey(
            tenant=scope.tenant,
            principal=scope.principal,
            issuer=issuer,
            client_id=client_id,
            resource=resource_url_from_server_url(server.url),
        )
        auth = ClientCredentialsOAuthProvider(
            server_url=server.url,
            storage=StoredTokens(self.store, key, self.held),
            client_id=client_id,
            client_secret=secret,
            issuer=issuer,
        )
        redact = HeldRedactor({credential: secret}, self.held, key)
        return Grant(auth=auth, identity=f"oauth\0{issuer}\0{client_id}\0{secret}", redact=redact)
