"""The OAuth callback's part of an MCP server's ``authorization_code`` grant
(``_consent``): find the Run that waits on a redirect's ``state``, and leave it the code.

Nothing here is sealed or secret: the index names a Run and its pending item, and the code
is worthless without the PKCE verifier, which stays sealed with the parked flow.
"""

from __future__ import annotations

import secrets

from psych_runtime.activities.mcp._consent import Arrived, Waiting, arrived_key, index_key
from psych_runtime.activities.tokens import TokenStore, unsealed

GONE = "no authorization waits on this state (unknown, used, or expired)"


async def waiting_on(store: TokenStore, state: str) -> Waiting:
    """The Run and pending item that wait on ``state`` (a refusal's redirect ends that
    wait: it brings no code to leave).

    Raises:
        LookupError: no Run waits on this state (unknown, used, or forgotten).
    """
    raw = await unsealed(store).get(index_key(state))
    if raw is None:
        raise LookupError(GONE)
    return Waiting.model_validate_json(raw)


async def deliver_authorization(
    store: TokenStore, code: str, state: str, iss: str | None
) -> Waiting:
    """The callback's part: leave the code for the Run that waits on ``state``.

    The first code to arrive stands until the Run exchanges it: the same redirect again (a
    reloaded page) is answered as the first was; another code for the same ``state`` (a
    replayed redirect) is refused, so it cannot replace the one the person's consent sent.

    Raises:
        LookupError: no Run waits on this state (unknown, used, or forgotten), or another
            code for it arrived first.
    """
    waiting = await waiting_on(store, state)
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
