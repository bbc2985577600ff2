"""Dynamic client registration (RFC 7591) of an ``authorization_code`` client whose Spec
names neither ``preregistered_client_id`` nor ``cimd_url`` (``allow_dynamic_registration``).

The SDK's provider registers the client itself, at the authorization server's
``registration_endpoint``, when its storage holds no client (``StoredTokens`` in
``_oauth``). What this module adds:

- Where a registration lives: the fleet's token store, under ``registration_key`` (the
  Run's tenant, the issuer, the MCP server, and a digest of the client metadata sent), so
  every Run, worker and principal of a tenant reuses one registration per server and
  metadata. A tenant's registration is its own: the store seals records for the Run's
  tenant (a registration may carry a client secret), and one tenant's Spec cannot shape or
  spend the client another tenant's people consent to.
- The token key of such a client (``dynamic_client_id``): a name derived from the same
  digest, known before anything is registered. The token record also keeps the client it
  was issued to, so a refresh uses that client even if the registration was replaced since.
- A client the authorization server no longer knows (a refresh or a code exchange
  answered ``invalid_client``: it lost or expired the registration) is forgotten with the
  token issued to it (``forget_registration``, ``client_refused``; the exchange finds the
  registration by ``registration_of``), so the flow takes the registration stored since or
  registers a new one, instead of asking a person to consent to a client the server
  refuses to show.
- Refusals, never a fallback: an authorization server whose metadata names no
  ``registration_endpoint`` (the SDK would post to ``/register`` at the MCP server's
  origin) is refused before anything is sent, and a registration the server refuses, or
  answers with a client the flow cannot use, ends the flow naming the server and what is
  wrong (``_registering``: an unusable client created there is deleted there when its
  answer offered RFC 7592 management).
- Two workers registering at once (neither found a registration stored): the first to
  store its registration stands (``keep_registration``, one ``TokenStore.update``), and
  the other takes it instead of its own, so every Run of the tenant uses one client. The
  one left unused is deleted at the authorization server when its registration answer
  offered RFC 7592 management (``registration_access_token`` and
  ``registration_client_uri``: ``Registering.discard``, through the tenant's egress as the
  registration went); without management it stays registered there, unused. A failed
  deletion is logged naming the client, and the flow goes on with the stored one; one
  failed for now is kept in the record for a later flow to try again, as a replaced
  client is (below; ``Registering.keep``), and so is an unusable client's.
- A stored client is checked before a consent's URL is built with it (``still_known``):
  no refused refresh or exchange tells a person with no token yet that the authorization
  server forgot it, and its consent page would be the server's error, which never
  redirects back. The check is a token request with the client's credentials and a code
  that cannot be valid (``Registering.probe``): ``invalid_client`` means forgotten (it is
  forgotten in the store and the flow registers again), ``invalid_grant`` known. RFC 7592's
  read is not used: a record from before 12-06 holds no management. Some servers answer
  ``invalid_client`` for any code they never issued: the client registered in place of a
  forgotten one is probed too, and ``invalid_client`` for it (a moment after the server
  registered it) makes the tenant remember the server's probe answers as untrusted
  (``_untrusted``: a record in the store), logged as a warning: its stored clients are
  not probed again until the mark expires (``UNTRUSTED_SECONDS``), so one registration
  is replaced needlessly per tenant, server and bound, not one at every consent.
- The scope: RFC 7591 makes it client metadata (the values the client may ask for), and
  an authorization server may refuse an authorization asking more (``invalid_scope``).
  No Spec names one: the SDK asks what the MCP server names (its challenge, its
  protected-resource metadata, a step-up's union), known only after the registration is
  read, so it is not in the key. The record keeps the scope its request asked; a stored
  client whose registration names a scope that does not cover the one asked now is
  replaced by one registered for both (``still_known``; the token records keep their
  own client), unless its request asked for that already.
- The record keeps the RFC 7592 management its answer offered (sealed with it, as the
  client's secret is; a record of an earlier build, without it, still loads), so the
  client a registration replaces is deleted at the authorization server, not at once: it
  stays in the record as retiring (``_retiring``: a consent link built with it must still
  lead back), and the first consent flow that reads the record after
  ``RETIRE_GRACE_SECONDS`` deletes it (``_stored_registration.retire_due``;
  ``Registering.retire``: best effort, a failure logged naming the client, tried again
  by a later flow when it failed for now, up to ``RETIRE_ATTEMPTS`` tries). A token issued
  to it then fails its refresh (``invalid_client``) and its person consents again, to the
  client that replaced it; a consent is never asked with a retiring client, even one a
  person's token record still names (``_known``). A registration forgotten keeps its
  retiring clients in a record with no client, which the client registered next takes
  over, and the forgotten client among them (the server's ``invalid_client`` may be
  wrong, ``_untrusted``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Protocol

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthRegistrationError
from mcp.client.auth.oauth2 import check_registration_usable
from mcp.client.auth.utils import (
    create_client_registration_request,
    handle_registration_response,
    union_scopes,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata
from pydantic import ValidationError

from psych_runtime.activities.mcp._registering import Registering, client_refused
from psych_runtime.activities.mcp._retiring import Managed, Retiring
from psych_runtime.activities.mcp._stored_registration import (
    Registration,
    fields,
    record_in,
    retire_due,
)
from psych_runtime.activities.mcp._untrusted import (
    UNTRUSTED_SECONDS,
    mark_untrusted,
    probe_untrusted,
)
from psych_runtime.activities.tokens import TokenKey, TokenStore

_log = logging.getLogger(__name__)

DYNAMIC = "psych:dcr:"
"""The prefix of a dynamically registered client's name in its tokens' keys."""

REGISTRATION = "psych:registration:"
"""The prefix of the client field of a registration's own key."""


def metadata_digest(metadata: OAuthClientMetadata) -> str:
    """sha256 hex of the client metadata a registration sends (the scope aside: the flow
    sets it from what the MCP server asks for, known only after the registration is read;
    one registered for less than asked is replaced, ``still_known``)."""
    fields = metadata.model_dump(mode="json", exclude_none=True, exclude={"scope"})
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def dynamic_client_id(metadata: OAuthClientMetadata) -> str:
    """The client field of the token keys of a client registered with ``metadata``."""
    return DYNAMIC + metadata_digest(metadata)


def is_dynamic(key: TokenKey) -> bool:
    """Whether ``key`` holds the tokens of a dynamically registered client."""
    return key.client_id.startswith(DYNAMIC)


def registration_key(
    tenant: str, issuer: str, resource: str, metadata: OAuthClientMetadata
) -> TokenKey:
    """Where ``tenant``'s registration with ``issuer`` for the MCP server ``resource`` is
    kept (one per client metadata; no principal: a registration names the application, a
    consent the person)."""
    return TokenKey(tenant, None, issuer, REGISTRATION + metadata_digest(metadata), resource)


def registration_of(key: TokenKey) -> TokenKey | None:
    """Where the registration of the client whose tokens ``key`` holds is kept (None: the
    client is not registered dynamically)."""
    if not is_dynamic(key):
        return None
    digest = key.client_id.removeprefix(DYNAMIC)
    return TokenKey(key.tenant, None, key.issuer, REGISTRATION + digest, key.resource)


def _client_in(data: bytes | None, key: TokenKey) -> OAuthClientInformationFull | None:
    record = record_in(data, key)
    return None if record is None else record.client


async def read_registration(store: TokenStore, key: TokenKey) -> OAuthClientInformationFull | None:
    """The client registered under ``key``; None when there is none (or its record is
    unreadable, or names another key: the flow then registers again and replaces it)."""
    return _client_in(await store.get(key), key)


async def asked_before(store: TokenStore, key: TokenKey, client_id: str, scope: str) -> bool:
    """Whether the registration under ``key`` is still ``client_id``'s and its request
    asked for all of ``scope`` (the authorization server registered less: asking again
    would not help)."""
    record = record_in(await store.get(key), key)
    if record is None or record.client is None or record.client.client_id != client_id:
        return False
    return covers(record.asked, scope)


def covers(registered: str | None, scope: str | None) -> bool:
    """Whether a client registered for ``registered`` (RFC 7591 2's ``scope``: the values
    it may ask for) may ask ``scope``; a registration naming none sets no bound we know."""
    if scope is None or registered is None:
        return True
    return set(scope.split()) <= set(registered.split())


async def keep_registration(
    store: TokenStore,
    key: TokenKey,
    client: OAuthClientInformationFull,
    registering: Registering | None = None,
    replacing: str | None = None,
) -> OAuthClientInformationFull:
    """Store ``client`` under ``key``, with the management its answer offered
    (``registering``), unless a registration other than ``replacing``'s is stored there
    already (another worker's, registered at the same time: the first stored stands); the
    client that stands. ``client`` left unused is deleted at the authorization server, or
    logged as left there (``Registering.discard``). ``replacing``'s client, replaced, is
    kept in the record as retiring with the management stored with it (deleted later:
    ``retire_due``), or, with none, logged as left there (``Registering.retire``); the
    retiring clients of the record are carried on, a record kept with no client
    (``forget_registration``) included."""
    asked = offered = None
    if registering is not None:
        asked, offered = registering.asked, registering.offered
    managed = None
    if offered is not None and offered.client_id == client.client_id:
        managed = Managed(uri=offered.uri, token=offered.token)
    record = Registration(key=fields(key), client=client, asked=asked, management=managed)
    now = time.time() if registering is None else registering.clock()
    standing, unmanaged = [client], list[str]()

    def first(data: bytes | None) -> bytes:
        stored, unmanaged[:] = record_in(data, key), []
        current = None if stored is None else stored.client
        if data is not None and current is not None and current.client_id != replacing:
            standing[0] = current
            return data
        standing[0] = client
        if stored is None:
            return record.model_dump_json().encode()
        retiring = [r for r in stored.retiring if r.client_id != client.client_id]
        gone = None if current is None else current.client_id
        if gone is not None and gone != client.client_id and stored.management is not None:
            management = stored.management
            retiring.append(Retiring(client_id=gone, management=management, replaced_at=now))
        elif gone is not None and gone != client.client_id:
            unmanaged.append(gone)
        return record.model_copy(update={"retiring": retiring}).model_dump_json().encode()

    await store.update(key, first)
    if registering is None:
        return standing[0]
    if standing[0].client_id != client.client_id:
        await registering.discard(client.client_id)
    for gone in unmanaged:
        await registering.retire(gone, None)
    return standing[0]


async def forget_registration(store: TokenStore, key: TokenKey, client_id: str, now: float) -> None:
    """Forget the registration under ``key`` if it is still ``client_id``'s (one another
    worker registered since is kept). Its retiring clients stay registered at the
    authorization server: a record with no client keeps them (``_stored_registration``),
    for the client registered next to take over, and a flow to delete when due. So does
    ``client_id`` itself, retiring from ``now``, with the management stored with it: the
    server's ``invalid_client`` may be wrong (``_untrusted``: a probe answered so for a
    client it knows), and a consent link built with it lead back; one really gone there
    answers its deletion 404 or 401, and is dropped then (logged)."""

    def change(data: bytes | None) -> bytes | None:
        if data is None:
            return None
        try:
            record = Registration.model_validate_json(data)
        except ValidationError:
            return data
        if record.client is None or record.client.client_id != client_id:
            return data
        retiring, management = record.retiring, record.management
        if management is not None and all(r.client_id != client_id for r in retiring):
            gone = Retiring(client_id=client_id, management=management, replaced_at=now)
            retiring = [*retiring, gone]
        if not retiring:
            return None
        emptied = {"client": None, "asked": None, "management": None, "retiring": retiring}
        return record.model_copy(update=emptied).model_dump_json().encode()

    await store.update(key, change)


def refuse_unregistrable(metadata: OAuthMetadata | None, issuer: str, dynamic: bool) -> None:
    """Before the SDK's registration request is sent: refuse it unless the client is
    ``dynamic`` and the authorization server names a ``registration_endpoint``.

    Raises:
        OAuthRegistrationError: why no client is registered (the SDK would otherwise post
            to ``/register`` at the MCP server's origin, or register a client the Spec
            did not ask for).
    """
    if not dynamic:
        raise OAuthRegistrationError(
            f"the authorization server {issuer} does not take client-id metadata documents "
            "(its metadata does not set client_id_metadata_document_supported), so "
            "oauth.cimd_url cannot be the client id; a client is registered dynamically "
            "only for a server with neither preregistered_client_id nor cimd_url"
        )
    if metadata is None:
        raise OAuthRegistrationError(
            f"the authorization server {issuer} published no metadata (RFC 8414), so no "
            "registration_endpoint: dynamic client registration is refused (set "
            "oauth.preregistered_client_id or oauth.cimd_url for this server)"
        )
    if metadata.registration_endpoint is None:
        raise OAuthRegistrationError(
            f"the authorization server {issuer} offers no dynamic client registration (its "
            "metadata names no registration_endpoint): set oauth.preregistered_client_id or "
            "oauth.cimd_url for this server"
        )


class _Storage(Protocol):
    """What ``still_known`` needs of ``_oauth.StoredTokens``."""

    store: TokenStore | None
    client: OAuthClientInformationFull | None
    registration: TokenKey | None
    registering: Registering | None

    async def get_client_info(self) -> OAuthClientInformationFull | None: ...

    async def forgot(
        self, client: OAuthClientInformationFull, response: httpx2.Response
    ) -> bool: ...

    async def set_client_info(
        self, client_info: OAuthClientInformationFull, replacing: str | None = None
    ) -> None: ...


async def still_known(
    provider: OAuthClientProvider, storage: _Storage
) -> OAuthClientInformationFull | None:
    """The client a consent's URL is built with (``_known``), registered for the scope the
    flow asks: RFC 7591 makes ``scope`` client metadata, the values the client may ask
    for, and an authorization server may refuse more. The scope is the MCP server's
    (its challenge, the SDK's choice; a step-up's union), known only once the flow
    discovered it, after the registration was read, so it is not in the registration's
    key: a stored client whose registration names a scope that does not cover the one
    asked now is replaced by one registered for both (``register_anew``; the replaced
    one kept as retiring, ``keep_registration``), unless its own request asked for it
    already (the server registered less: asking again would not). Retiring clients whose
    grace has passed are deleted at the server first (``retire_due``).

    Raises:
        OAuthRegistrationError: a new registration was refused, or unusable.
    """
    client, registering = await _known(provider, storage), storage.registering
    store, registration = storage.store, storage.registration
    if registering is not None and store is not None and registration is not None:
        await retire_due(store, registration, registering)
    asked = provider.context.client_metadata.scope
    if client is None or registering is None or covers(client.scope, asked):
        return client
    if client.client_id == registering.registered or registration is None:
        return client
    if store is None or asked is None:
        return client
    if await asked_before(store, registration, client.client_id, asked):
        return client
    wider = union_scopes(client.scope, asked)
    _log.info(
        "the client %s of MCP server %r is registered at %s for scope %r, not %r as asked "
        "now: another is registered for %r",
        client.client_id,
        registering.server,
        registering.issuer,
        client.scope,
        asked,
        wider,
    )
    await register_anew(provider, storage, registering, wider, client.client_id)
    return storage.client


async def _known(
    provider: OAuthClientProvider, storage: _Storage
) -> OAuthClientInformationFull | None:
    """The provider's client (a stored registration)
    while the authorization server knows it (``Registering.probe``); forgotten there, it
    is forgotten in the store and the one registered since by another worker is taken,
    else a new one is registered (through the tenant's egress) and stored, the first
    stored standing (``keep_registration``). A client this flow registered itself is
    not asked about. One that is no longer the registration's (a token record's, for its
    refresh: replaced or forgotten since, so retiring, deleted a grace after that) is not
    used for a consent: the registration's is, else a new one.

    The probe is asked of the client this flow registered in its place too: a server
    cannot have forgotten a client it registered a moment ago, so ``invalid_client`` then
    says its token endpoint answers so for any code it never issued (not RFC 6749's
    ``invalid_grant``). The tenant remembers that of the authorization server
    (``_untrusted``, logged as a warning) and probes no stored client there again until
    the mark expires: one registration replaced needlessly per bound, not one at every
    consent.

    Raises:
        OAuthRegistrationError: the new registration was refused, or unusable.
    """
    client, registering, store = provider.context.client_info, storage.registering, storage.store
    if client is None or registering is None or client.client_id == registering.registered:
        return client
    if store is not None and storage.registration is not None:
        current = await read_registration(store, storage.registration)
        if current is None or current.client_id != client.client_id:
            # A token record's client (a refresh's), replaced or forgotten since: retiring,
            # deleted a grace after that, never after a consent started with it now.
            _log.info(
                "the client %s of MCP server %r is no longer its registration's: a consent "
                "is asked with the one that replaced it",
                client.client_id,
                registering.server,
            )
            storage.client = None
            client = provider.context.client_info = await storage.get_client_info()
            if client is None:
                await register_anew(provider, storage, registering)
                return storage.client
    if store is not None and await probe_untrusted(
        store, registering.tenant, registering.issuer, registering.clock()
    ):
        return client
    probed = await registering.probe(provider)
    if probed is None or not await storage.forgot(client, probed):
        return client
    _log.info(
        "the authorization server %s no longer knows the client %s of MCP server %r: "
        "forgotten, another one is used",
        registering.issuer,
        client.client_id,
        registering.server,
    )
    if storage.client is None:  # none registered since by another worker
        fresh = await register_anew(provider, storage, registering)
        if storage.store is not None and fresh is not None:
            await _probed_again(provider, fresh, registering, storage.store)
    return storage.client


async def register_anew(
    provider: OAuthClientProvider,
    storage: _Storage,
    registering: Registering,
    scope: str | None = None,
    replacing: str | None = None,
) -> OAuthClientInformationFull | None:
    """Register a client as the SDK would (for ``scope``, else the one the flow asks),
    through the tenant's egress, and store it in place of ``replacing``'s registration or
    none (the first stored standing); it, if it stood (else None: another worker's did).

    Raises:
        OAuthRegistrationError: the registration was refused, or unusable.
    """
    context = provider.context
    refuse_unregistrable(context.oauth_metadata, registering.issuer, True)
    base = context.get_authorization_base_url(context.server_url)
    metadata = context.client_metadata
    if scope is not None:
        metadata = metadata.model_copy(update={"scope": scope})
    request = create_client_registration_request(context.oauth_metadata, metadata, base)
    response = await registering.send(request)
    await registering.answered(response)
    fresh = await handle_registration_response(response)
    check_registration_usable(fresh)
    fresh.issuer = provider._expected_issuer()  # as the SDK stamps its registration
    await storage.set_client_info(fresh, replacing)
    standing = storage.client
    return standing if standing is not None and standing.client_id == fresh.client_id else None


async def _probed_again(
    provider: OAuthClientProvider,
    fresh: OAuthClientInformationFull,
    registering: Registering,
    store: TokenStore,
) -> None:
    """Probe ``fresh``, registered a moment ago in place of a client the probe said
    forgotten; ``invalid_client`` again: the tenant remembers the authorization server's
    probe answers as untrusted (``still_known``)."""
    provider.context.client_info = fresh
    again = await registering.probe(provider)
    if again is None or not await client_refused(again):
        return
    tenant, issuer = registering.tenant, registering.issuer
    await mark_untrusted(store, tenant, issuer, fresh.client_id, registering.clock())
    _log.warning(
        "the authorization server %s answers invalid_client for a code it never issued, "
        "also to the client %s it registered a moment ago for MCP server %r (not RFC 6749's "
        "invalid_grant): tenant %r no longer probes its stored clients before a consent "
        "for %d hours (one it really forgot is replaced when a refresh or a code exchange "
        "is refused)",
        issuer,
        fresh.client_id,
        registering.server,
        tenant,
        UNTRUSTED_SECONDS // 3600,
    )
