"""Reaching an A2A peer for a Scope: its credential resolved by name and sent with the
peer's ``scheme``, the protocol headers, a transport from ``a2a-sdk`` on the worker's
egress client, pooled per (tenant, principal, url, credential identity), and the peer's
Agent Card cached per the same key.

Why transports and not ``a2a.client.ClientFactory``: the factory sets its version header
on the httpx client it is given, and the egress port's client is shared by every request of
a tenant (HTTP tools too); headers here travel per request instead (``ClientCallContext``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass

import httpx
from a2a.client import A2ACardResolver, ClientCallContext
from a2a.client.transports.base import ClientTransport
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.client.transports.rest import RestTransport
from a2a.client.transports.tenant_decorator import TenantTransportDecorator
from a2a.extensions.common import HTTP_EXTENSION_HEADER
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER, TransportProtocol
from google.protobuf.json_format import MessageToDict

from psych_runtime.activities.egress import Egress
from psych_runtime.activities.secrets import Redactor, SecretResolver, resolve_secret
from psych_runtime.specs import A2APeer, NotFound, Scope


class PeerUnavailable(Exception):
    """A peer cannot be used for this Scope (the message names why, never a secret)."""


PoolKey = tuple[str, str | None, str, str]
"""(tenant, principal, url, credential identity): never the URL alone, so one tenant's
credential never rides on another's connection or card."""


@dataclass(frozen=True)
class Connection:
    """What talking to a peer needs for one Scope: the pool key, the per-request headers
    and a redactor holding the credential sent."""

    key: PoolKey
    headers: dict[str, str]
    redact: Redactor

    def context(self, timeout: float) -> ClientCallContext:
        """The call context of one request (its headers, its timeout)."""
        return ClientCallContext(service_parameters=dict(self.headers), timeout=timeout)


async def connect(peer: A2APeer, scope: Scope, secrets: SecretResolver | None) -> Connection:
    """The pool key, headers and redactor for ``peer`` under ``scope``.

    Raises:
        PeerUnavailable: the credential cannot be resolved.
    """
    headers = {VERSION_HEADER: PROTOCOL_VERSION_1_0}
    if peer.extensions:
        headers[HTTP_EXTENSION_HEADER] = ",".join(peer.extensions)
    redact = Redactor()
    identity = "-"
    if peer.credential is not None:
        if secrets is None:
            raise PeerUnavailable(
                f"credential {peer.credential!r} cannot be resolved: the worker has no "
                "SecretResolver"
            )
        try:
            secret = await resolve_secret(secrets, scope, peer.credential)
        except NotFound as err:
            raise PeerUnavailable(
                f"credential {peer.credential!r} is not available for tenant {scope.tenant!r}"
            ) from err
        headers["Authorization"] = f"{peer.scheme} {secret}"
        redact.add(peer.credential, secret)
        identity = hashlib.sha256(f"{peer.scheme}\0{secret}".encode()).hexdigest()
    return Connection(
        key=(scope.tenant, scope.principal, peer.url, identity), headers=headers, redact=redact
    )


def card_hash(card: AgentCard) -> str:
    """16 hex digits of the sha256 of the card's canonical JSON."""
    body = json.dumps(MessageToDict(card), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fetched:
    """A peer's card as the worker holds it."""

    card: AgentCard
    hash: str
    at: float


class Peers:
    """The worker's cards and transports, per pool key (bounded, least recently used
    dropped first)."""

    def __init__(self, egress: Egress, *, card_ttl_seconds: float, max_entries: int) -> None:
        self.egress = egress
        self.card_ttl_seconds = card_ttl_seconds
        self.max_entries = max_entries
        self._cards: OrderedDict[PoolKey, Fetched] = OrderedDict()
        self._transports: OrderedDict[PoolKey, ClientTransport] = OrderedDict()

    def _http(self, scope: Scope) -> httpx.AsyncClient:
        return self.egress.http(scope.tenant)

    async def card(
        self, peer: A2APeer, scope: Scope, connection: Connection, *, fetch_seconds: float
    ) -> tuple[Fetched, bool]:
        """The peer's card and whether the cache answered.

        Raises:
            PeerUnavailable: it could not be fetched or parsed (the reason redacted).
        """
        key = connection.key
        held = self._cards.get(key)
        if held is not None and time.monotonic() - held.at < self.card_ttl_seconds:
            self._cards.move_to_end(key)
            return held, True
        resolver = A2ACardResolver(self._http(scope), peer.url)
        try:
            # httpx's timeout bounds each phase (a slow drip resets it): the whole fetch,
            # redirects included, is bounded here.
            async with asyncio.timeout(fetch_seconds):
                card = await resolver.get_agent_card(
                    http_kwargs={"headers": dict(connection.headers), "timeout": fetch_seconds}
                )
        except TimeoutError as err:
            raise PeerUnavailable(f"no card within {fetch_seconds:g} s") from err
        except Exception as err:  # a card that cannot be had is data: the peer is down
            raise PeerUnavailable(connection.redact(describe(err))) from err
        fetched = Fetched(card=card, hash=card_hash(card), at=time.monotonic())
        if held is None or held.hash != fetched.hash:
            self._transports.pop(key, None)
        self._cards[key] = fetched
        while len(self._cards) > self.max_entries:
            self._cards.popitem(last=False)
        return fetched, False

    def transport(self, scope: Scope, connection: Connection, card: AgentCard) -> ClientTransport:
        """The pooled transport for this key, made from the card's interfaces.

        Raises:
            PeerUnavailable: the card offers no A2A 1.0 JSON-RPC or HTTP+JSON interface.
        """
        key = connection.key
        held = self._transports.get(key)
        if held is not None:
            self._transports.move_to_end(key)
            return held
        made: ClientTransport | None = None
        for interface in card.supported_interfaces:
            if interface.protocol_version and not interface.protocol_version.startswith("1."):
                continue
            if interface.protocol_binding == TransportProtocol.JSONRPC:
                made = JsonRpcTransport(self._http(scope), card, interface.url, True)
            elif interface.protocol_binding == TransportProtocol.HTTP_JSON:
                made = RestTransport(self._http(scope), card, interface.url, True)
            if made is not None:
                if interface.tenant:
                    # A2A: the tenant an interface names is set in each request to it (a
                    # request's own, the Spec's ``tenant``, wins), as the SDK's factory does.
                    made = TenantTransportDecorator(made, interface.tenant)
                break
        if made is None:
            bindings = ", ".join(
                f"{i.protocol_binding} {i.protocol_version or '?'}"
                for i in card.supported_interfaces
            )
            raise PeerUnavailable(
                f"its card offers no A2A 1.0 JSON-RPC or HTTP+JSON interface ({bindings or 'none'})"
            )
        self._transports[key] = made
        while len(self._transports) > self.max_entries:
            self._transports.popitem(last=False)
        return made

    def forget(self, key: PoolKey) -> None:
        """Drop what is held for ``key`` (a peer that stopped answering)."""
        self._cards.pop(key, None)
        self._transports.pop(key, None)


def describe(err: BaseException) -> str:
    """A short reason for a failure talking to a peer (type and message)."""
    text = str(err).strip()
    cause = err.__cause__
    if not text and cause is not None:
        text = str(cause).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
