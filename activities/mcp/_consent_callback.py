"""The OAuth callback's part of an MCP server's ``authorization_code`` grant
(``_consent``): find the Run that waits on a redirect's ``state``, check the redirect's
RFC 9207 ``iss``, and leave it the code.

Nothing here is sealed or secret: the index names a Run, its pending item and the
authorization server it asked, and the code is worthless without the PKCE verifier, which
stays sealed with the parked flow. No SDK import: the callback runs outside any worker.
"""

from __future__ import annotations

import re
import secrets

from pydantic import BaseModel

from psych_runtime.activities.tokens import TokenKey, TokenStore, unsealed

GONE = "no authorization waits on this state (unknown, used, or expired)"

CALLBACK_TENANT = "psych:oauth-callback"
"""The tenant field of the callback's own records (a Scope's tenant cannot contain ``:``
in the ways a Run's can be addressed, and the key is hashed anyway)."""

ISS_CHARS = 200
"""The most of a redirect's ``iss`` an answer repeats (anyone can send the redirect)."""

_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


class ExpectedIss(BaseModel):
    """What a redirect's RFC 9207 ``iss`` must be: the authorization server the consent
    was asked of, from its metadata (no secret)."""

    issuer: str | None
    """Its issuer as its metadata names it (None: the flow read no metadata; then a
    redirect naming an ``iss`` is refused, as the exchange refuses it)."""
    required: bool
    """Its metadata sets ``authorization_response_iss_parameter_supported``: a redirect
    without ``iss`` is refused."""


class Waiting(BaseModel):
    """The callback's index entry of a flow: which Run, which pending item (no secret)."""

    workflow_id: str
    tenant: str
    id: str
    iss: ExpectedIss | None = None
    """What the redirect's ``iss`` must be (None: an entry parked before the callback
    checked it: a refusal is then taken whatever its ``iss``, and a code's ``iss`` is
    checked by the Run's exchange only)."""


class Arrived(BaseModel):
    """What the redirect brought, waiting for the Run's exchange."""

    code: str
    state: str
    iss: str | None


class WrongIssuer(LookupError):
    """A redirect whose RFC 9207 ``iss`` is not the authorization server's the consent was
    asked of (or is missing where that server sends one): taken neither as a consent nor
    as a refusal, so the Run's wait goes on (the message names the mismatch)."""


def index_key(state: str) -> TokenKey:
    """Where the callback finds the Run a ``state`` belongs to."""
    return TokenKey(CALLBACK_TENANT, None, "psych:consent", "state", state)


def arrived_key(id: str) -> TokenKey:
    """Where the callback leaves the code for the Run's exchange."""
    return TokenKey(CALLBACK_TENANT, None, "psych:consent", "code", id)


def check_iss(waiting: Waiting, iss: str | None) -> None:
    """Refuse a redirect whose ``iss`` is not what ``waiting``'s authorization server
    sends (RFC 9207 2.4: compared as strings, as the Run's exchange compares a code's), on
    an error response as on a code: a redirect of another server, one the person also uses
    (a mix-up), must neither end the wait nor stand as the consent.

    Raises:
        WrongIssuer: ``iss`` differs from the issuer, is present where the flow knows no
            issuer, or is missing where the issuer says it sends one.
    """
    expected = waiting.iss
    if expected is None:
        return
    kept = "refused; the Run still waits for consent"
    if iss is None:
        if expected.required:
            raise WrongIssuer(
                f"the redirect carries no iss, which the authorization server "
                f"{expected.issuer} says it sends (RFC 9207): {kept}"
            )
        return
    if iss != expected.issuer:
        shown = _UNPRINTABLE.sub("?", iss)[:ISS_CHARS]
        asked = expected.issuer or "an authorization server that published no metadata"
        raise WrongIssuer(
            f"the redirect's iss {shown!r} is not {asked}, the authorization server this "
            f"consent was asked of (RFC 9207: another server's redirect): {kept}"
        )


async def waiting_on(store: TokenStore, state: str, iss: str | None) -> Waiting:
    """The Run and pending item that wait on ``state``, for a redirect whose ``iss`` is
    ``iss`` (a refusal's redirect ends that wait: it brings no code to leave).

    Raises:
        LookupError: no Run waits on this state (unknown, used, or forgotten).
        WrongIssuer: a Run waits on it, but for another authorization server's redirect
            (``check_iss``).
    """
    raw = await unsealed(store).get(index_key(state))
    if raw is None:
        raise LookupError(GONE)
    waiting = Waiting.model_validate_json(raw)
    check_iss(waiting, iss)
    return waiting


async def deliver_authorization(
    store: TokenStore, code: str, state: str, iss: str | None
) -> Waiting:
    """The callback's part: leave the code for the Run that waits on ``state``.

    The first code to arrive stands until the Run exchanges it: the same redirect again (a
    reloaded page) is answered as the first was; another code for the same ``state`` (a
    replayed redirect) is refused, so it cannot replace the one the person's consent sent.
    A code whose ``iss`` is wrong is not left (``check_iss``).

    Raises:
        LookupError: no Run waits on this state (unknown, used, or forgotten), or another
            code for it arrived first.
        WrongIssuer: the redirect's ``iss`` is not the authorization server's.
    """
    waiting = await waiting_on(store, state, iss)
    arrived = Arrived(code=code, state=state, iss=iss).model_dump_json().encode()
    before: list[bytes | None] = [None]

    def first(record: bytes | None) -> bytes:
        before[0] = record
        return arrived if record is None else record

    await unsealed(store).update(arrived_key(waiting.id), first)
    if before[0] is not None:
        standing = Arrived.model_validate_json(before[0])
        if not secrets.compare_digest(standing.code.encode(), code.encode()):
            raise LookupError(
                "this authorization was already answered: another code arrived for its state first"
            )
    if await unsealed(store).get(index_key(state)) is None:
        # The Run forgot the flow meanwhile (its wait ended, or the code was exchanged):
        # nobody will read this code, so it does not stay in the store.
        await unsealed(store).delete(arrived_key(waiting.id))
        raise LookupError(GONE)
    return waiting
