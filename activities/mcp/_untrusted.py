"""The mark a tenant keeps of an authorization server whose answer to the pre-consent probe
(``_registering.Registering.probe``) cannot be trusted: its token endpoint answered
``invalid_client`` for a code it never issued also to a client it registered a moment ago
(``_registration.still_known``), so the tenant probes no stored client there while the
mark holds.

The mark expires (``UNTRUSTED_SECONDS``): a server fixed since, or one whose answer was a
passing fault (a client not yet known at every node a moment after it was registered), is
trusted again, and a client it really forgot is then replaced before a person is asked to
consent to it. The cost of the bound: a server still untrusted gets one needless
registration per tenant each time the mark expires, not one at every consent. A mark of
an earlier build holds no time: it counts as expired (one probe, at most one needless
registration, and the mark is set again, with its time).
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ValidationError

from psych_runtime.activities.tokens import TokenKey, TokenStore

_log = logging.getLogger(__name__)

UNTRUSTED = "psych:probe-untrusted"
"""The client field of the key under which a tenant remembers an authorization server
whose answer to ``Registering.probe`` cannot be trusted (``probe_untrusted``)."""

UNTRUSTED_SECONDS = 7 * 24 * 3600.0
"""How long a mark holds (a week): after it, the server's stored clients are probed again.
Longer spends fewer needless registrations on a server still untrusted (at most one per
tenant and bound); shorter trusts a fixed server sooner."""


def untrusted_key(tenant: str, issuer: str) -> TokenKey:
    """Where ``tenant`` remembers that ``issuer`` answers ``invalid_client`` for a code it
    never issued, also to a client it knows (the authorization server's, whatever MCP
    server it serves)."""
    return TokenKey(tenant, None, issuer, UNTRUSTED, issuer)


class _Untrusted(BaseModel):
    """The record under ``untrusted_key``: its key, the client whose probe told, and when
    (``time.time()`` seconds; None: a mark of an earlier build, as expired)."""

    key: tuple[str, str | None, str, str, str]
    client_id: str
    at: float | None = None


def _fields(key: TokenKey) -> tuple[str, str | None, str, str, str]:
    return (key.tenant, key.principal, key.issuer, key.client_id, key.resource)


async def probe_untrusted(store: TokenStore, tenant: str, issuer: str, now: float) -> bool:
    """Whether ``tenant`` holds ``issuer``'s probe answers as untrusted at ``now``: a mark
    set less than ``UNTRUSTED_SECONDS`` before (an unreadable record, one naming another
    key, or one holding no time, as none). A mark dated after ``now`` (set by a worker
    whose clock runs ahead) holds while it is less than the bound ahead: one dated further
    (a clock years off) would otherwise hold for as long, as a mark that never expired."""
    key = untrusted_key(tenant, issuer)
    data = await store.get(key)
    try:
        mark = None if data is None else _Untrusted.model_validate_json(data)
    except ValidationError:
        return False
    if mark is None or mark.key != _fields(key) or mark.at is None:
        return False
    return -UNTRUSTED_SECONDS < now - mark.at < UNTRUSTED_SECONDS


async def mark_untrusted(
    store: TokenStore, tenant: str, issuer: str, client_id: str, now: float
) -> None:
    """Remember, from ``now`` for ``UNTRUSTED_SECONDS``, that ``issuer`` answered the
    probe of ``client_id``, registered a moment before, ``invalid_client``."""
    key = untrusted_key(tenant, issuer)
    record = _Untrusted(key=_fields(key), client_id=client_id, at=now)
    await store.put(key, record.model_dump_json().encode())
