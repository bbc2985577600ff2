"""The cursor of a paged listing: where Temporal's visibility listing goes on, bound to
the tenant and the filters it was made for.

A cursor is ``<payload>.<check>``: the payload is base64url JSON holding a digest of the
tenant, a digest of the filters and Temporal's page token; the check is a digest of the
payload, so a cursor cut short or edited by hand is refused as damaged before Temporal
sees it. It is not a credential: the listing it continues is always queried with the
caller's own tenant (and filters), so a cursor can only say where to go on, never whose
Runs to read. Tenant and filters are kept as digests, so a cursor shows neither.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from psych_runtime.specs import BadCursor

_VERSION = 1
_CHECK_CHARS = 16
_DIGEST_CHARS = 32
_REFUSED = "start the listing again without a cursor"


@dataclass(frozen=True)
class ListingFilters:
    """What a listing was asked for, which its cursor is bound to."""

    agent: str | None
    version_hash: str | None
    status: str | None
    suspended: bool
    waiting_on: tuple[str, ...] = ()
    """Suspension reasons, sorted: only Runs waiting on one of them (empty: any Run)."""

    def digest(self) -> str:
        """The filters' digest (canonical JSON). ``waiting_on`` is in it only when given,
        so a cursor made before it existed still reads."""
        fields: list[object] = [self.agent, self.version_hash, self.status, self.suspended]
        if self.waiting_on:
            fields.append(list(self.waiting_on))
        data = json.dumps(fields, separators=(",", ":"))
        return _digest(b"filters", data.encode())


def _digest(kind: bytes, data: bytes) -> str:
    return hashlib.sha256(b"psych-list-cursor\0" + kind + b"\0" + data).hexdigest()[:_DIGEST_CHARS]


def _check(payload: str) -> str:
    return _digest(b"check", payload.encode())[:_CHECK_CHARS]


def make_cursor(tenant: str, filters: ListingFilters, token: bytes) -> str:
    """The cursor that continues a listing of ``tenant`` with ``filters`` at ``token``."""
    data = {
        "v": _VERSION,
        "tenant": _digest(b"tenant", tenant.encode()),
        "filters": filters.digest(),
        "token": base64.urlsafe_b64encode(token).decode(),
    }
    raw = json.dumps(data, separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return f"{payload}.{_check(payload)}"


def read_cursor(cursor: str, tenant: str, filters: ListingFilters) -> bytes:
    """Temporal's page token a cursor holds, once it is known to be whole and made for
    this tenant's listing with these filters.

    Raises:
        BadCursor: the cursor is damaged or made up, or it was made for another tenant's
            listing, or for one with other filters; the message says which.
    """
    payload, dot, check = cursor.partition(".")
    if not dot or not payload or check != _check(payload):
        raise BadCursor(
            "the cursor is damaged or was not made by a listing (give back the "
            f"next_cursor a listing answered, unchanged), or {_REFUSED}"
        )
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        fields = (data["v"], data["tenant"], data["filters"], data["token"])
        if not all(isinstance(field, str) for field in fields[1:]):
            raise TypeError("a field is not a string")
        token = base64.urlsafe_b64decode(data["token"].encode())
    except (ValueError, TypeError, KeyError, binascii.Error, RecursionError) as err:
        # RecursionError: JSON nested past the parser's depth, which a made-up cursor with
        # a fresh check (no secret) may hold; as any other payload that is not a cursor.
        raise BadCursor(f"the cursor does not read as one ({err}): {_REFUSED}") from err
    if data["v"] != _VERSION:
        raise BadCursor(f"the cursor is of another format ({data['v']!r}): {_REFUSED}")
    if data["tenant"] != _digest(b"tenant", tenant.encode()):
        raise BadCursor(
            f"the cursor was made for another tenant's listing, not tenant {tenant!r}'s: {_REFUSED}"
        )
    if data["filters"] != filters.digest():
        raise BadCursor(
            "the cursor was made for a listing with other filters (agent, version, status, "
            "waiting) than these: give the filters it was made with, or "
            f"{_REFUSED}"
        )
    return token
