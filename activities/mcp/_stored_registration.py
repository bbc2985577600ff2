"""A dynamic registration's record in the token store (``_registration`` says why it is
kept there and by whom), and the deletion of the clients it replaced once they are due
(``_retiring``: why they are kept, and when and how often they are tried).

``retire_due`` takes the due ones out of the record in one ``TokenStore.update`` before
deleting them, so only the flow whose update took one deletes it; one whose deletion
failed for now is put back with another ``update`` (its tries counted), unless another
flow put it back meanwhile, so the next flow due tries it again. A record whose current
client the authorization server forgot keeps its retiring clients with no client
(``_registration.forget_registration``) until a client registered next takes them over
(``keep_registration``).
"""

from __future__ import annotations

import logging

from mcp.shared.auth import OAuthClientInformationFull
from pydantic import BaseModel, ValidationError

from psych_runtime.activities.mcp._registering import Management, Registering
from psych_runtime.activities.mcp._retiring import (
    RETIRE_ATTEMPTS,
    Managed,
    Retiring,
    is_due,
    redated,
)
from psych_runtime.activities.tokens import TokenKey, TokenStore
from psych_runtime.specs import PsychError

_log = logging.getLogger(__name__)


class Registration(BaseModel):
    """A stored registration: the key it was stored under, the client registered (None:
    the authorization server forgot it, and the record is kept for its retiring clients;
    an earlier build reads such a record as none), the scope its request asked (None:
    none, or a record from before 12-06), and the RFC 7592 management its answer offered
    (None: none, or a record from before it was kept; a build before reads a record
    holding it, ignoring it), and the clients it replaced that are not deleted yet
    (``_retiring``; empty in an earlier build's record, which ignores them), sealed with
    the record."""

    key: tuple[str, str | None, str, str, str]
    client: OAuthClientInformationFull | None
    asked: str | None = None
    management: Managed | None = None
    retiring: list[Retiring] = []


def fields(key: TokenKey) -> tuple[str, str | None, str, str, str]:
    """``key`` as a record names it."""
    return (key.tenant, key.principal, key.issuer, key.client_id, key.resource)


def record_in(data: bytes | None, key: TokenKey) -> Registration | None:
    """The registration record ``data`` of ``key`` (None: no record, an unreadable one,
    or one naming another key)."""
    if data is None:
        return None
    try:
        record = Registration.model_validate_json(data)
    except ValidationError:
        return None
    return record if record.key == fields(key) else None


async def retire_due(store: TokenStore, key: TokenKey, registering: Registering) -> None:
    """Delete at the authorization server the retiring clients of the registration under
    ``key`` that are due (``_retiring.is_due``), after taking them out of the record in
    one ``TokenStore.update``: only the flow whose update took one deletes it. Best effort
    (``Registering.retire``): one whose deletion failed for now, with tries left, is put
    back with its tries counted (``put_back``; a token store that cannot put it back
    leaves it registered there, logged naming it, and the flow goes on). One read, no
    write, when none is due (nor dated far ahead: ``redated`` in the same update).

    Raises:
        PsychError: the token store failed the first read or the update taking them out
            (nothing was deleted then).
    """
    now = registering.clock()
    record = record_in(await store.get(key), key)
    if record is None or all(redated(r, now) == r and not is_due(r, now) for r in record.retiring):
        return
    due = list[Retiring]()

    def take(data: bytes | None) -> bytes | None:
        stored, due[:] = record_in(data, key), []
        if stored is None:
            return data
        due.extend(r for r in stored.retiring if is_due(r, now))
        kept = [redated(r, now) for r in stored.retiring if not is_due(r, now)]
        if not due and kept == stored.retiring:
            return data
        return stored.model_copy(update={"retiring": kept}).model_dump_json().encode()

    await store.update(key, take)
    again = list[Retiring]()
    for gone in due:
        held, left = gone.management, RETIRE_ATTEMPTS - gone.attempts - 1
        management = Management(gone.client_id, held.uri, held.token)
        if await registering.retire(gone.client_id, management, left):
            again.append(gone.model_copy(update={"attempts": gone.attempts + 1, "tried_at": now}))
    if not again:
        return
    try:
        await put_back(store, key, again, registering)
    except PsychError as err:
        # Taken out of the record already: not raised, as the consent flow is not at stake
        # (its registration is stored), but named, as each stays registered there.
        why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        for gone in again:
            _log.warning(
                "the client %s of MCP server %r stays registered at the authorization "
                "server %s: its deletion failed, and the token store could not put it back "
                "in the registration's record for a later try (%s): it is not tried again",
                gone.client_id or f"(no client_id) at {gone.management.uri}",
                registering.server,
                registering.issuer,
                why,
            )


async def put_back(
    store: TokenStore, key: TokenKey, again: list[Retiring], registering: Registering
) -> bool:
    """Put ``again`` (back) into the record under ``key`` in one ``TokenStore.update`` (the
    record written since kept as it is, each of ``again`` added unless it holds it,
    ``_held_as``; no record: one with no client holds them); whether the record holds
    them now. A record that no longer reads as ``key``'s is left as it is, and their
    deletion given up, logged naming each. Also how a flow keeps a client it registered
    and dropped whose deletion failed for now (``Registering.keep``).

    Raises:
        PsychError: what ``store.update`` raises (``StoreUnavailable``: it did not answer).
    """
    lost = list[Retiring]()

    def put(data: bytes | None) -> bytes | None:
        lost[:] = []
        stored = record_in(data, key)
        if data is None:
            fresh = Registration(key=fields(key), client=None, retiring=again)
            return fresh.model_dump_json().encode()
        if stored is None:
            lost.extend(again)
            return data
        held = {_held_as(r) for r in stored.retiring}
        if stored.client is not None:
            held.add((stored.client.client_id,))
        back = stored.retiring + [r for r in again if _held_as(r) not in held]
        return stored.model_copy(update={"retiring": back}).model_dump_json().encode()

    await store.update(key, put)
    for gone in lost:
        _log.warning(
            "the client %s of MCP server %r stays registered at the authorization server "
            "%s: its deletion failed, and the registration's record no longer reads to put "
            "it (back) in: it is not tried again",
            gone.client_id or f"(no client_id) at {gone.management.uri}",
            registering.server,
            registering.issuer,
        )
    return not lost


def _held_as(retiring: Retiring) -> tuple[str, ...]:
    """What tells ``retiring`` apart in a record: its client id; an unusable client's
    answer that named none (``Registering.answered``), its management, which its deletion
    uses (RFC 7592 2.3): its ``registration_client_uri`` and access token (the URI alone
    may be one for every client: RFC 7592 3 only recommends one per client)."""
    if retiring.client_id:
        return (retiring.client_id,)
    return ("", retiring.management.uri, retiring.management.token)
