"""The cursor of a paged listing: where Temporal's visibility listing goes on, bound to
the tenant and the filters it was made for.

A cursor is ``<payload>.<check>``: the payload is base64url JSON holding a digest of the
tenant, a digest of the filters, Temporal's page token (empty: the listing's start) and
when the listing started (``since``, microseconds, by Temporal's clock: see
``continued_since``; absent in the cursors made before it);
the check is a digest of the payload, so a cursor cut short or edited by hand is refused
as damaged before Temporal sees it. It is not a credential: the listing it continues is
always queried with the caller's own tenant (and filters), so a cursor can only say where
to go on, never whose Runs to read. Tenant and filters are kept as digests, so a cursor
shows neither.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from psych_runtime.specs import BadCursor
from psych_runtime.workflows.contract._records import SuspensionReason

_VERSION = 1
_CHECK_CHARS = 16
_DIGEST_CHARS = 32
_REFUSED = "start the listing again without a cursor"


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The start of a listing of a tenant none of whose executions continued as new."""


def continued_since(since: datetime | None) -> str:
    """The visibility clause that leaves out the executions a Run continued as new from
    (closed ``ContinuedAsNew``: the Run goes on in the next), but those closed after the
    listing started at ``since`` (None: none of them). A Run that continues as new while a
    listing pages on starts its new execution at the listing's head, before the cursor:
    the one it left stays listed at its place then, so the Run is not skipped (a repeat
    at most). ``since`` is Temporal's time (``ceil_micros`` of a close time it answered):
    one of the client's clock would drop or repeat Runs by the clocks' difference."""
    every = "ExecutionStatus != 'ContinuedAsNew'"
    if since is None:
        return every
    return f"({every} OR CloseTime > '{since.isoformat().replace('+00:00', 'Z')}')"


def ceil_micros(stamp: Timestamp) -> datetime:
    """``stamp`` rounded up to the microsecond (what a cursor keeps): an execution closed
    at ``stamp`` is not past it, whatever precision the visibility store keeps."""
    micros = -(-stamp.nanos // 1000)
    return datetime.fromtimestamp(stamp.seconds, UTC) + timedelta(microseconds=micros)


@dataclass(frozen=True)
class Resumed:
    """What a cursor holds: Temporal's page token (empty: the listing's start) and when
    the listing started (None: a cursor made before that was kept)."""

    token: bytes
    since: datetime | None


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


def waiting_values(reasons: Collection[str]) -> tuple[str, ...]:
    """Every ``PsychSuspension`` value of a Run waiting on one of ``reasons``: the value is
    the sorted, comma-joined set of the reasons its pending items (its own and its
    children's) wait on (``Suspensions.reasons``), so these are the joins of every set of
    reasons that holds one of them."""
    every = sorted(r.value for r in SuspensionReason)
    return tuple(
        ",".join(chosen)
        for size in range(1, len(every) + 1)
        for chosen in itertools.combinations(every, size)
        if set(chosen) & set(reasons)
    )


def _digest(kind: bytes, data: bytes) -> str:
    return hashlib.sha256(b"psych-list-cursor\0" + kind + b"\0" + data).hexdigest()[:_DIGEST_CHARS]


def _check(payload: str) -> str:
    return _digest(b"check", payload.encode())[:_CHECK_CHARS]


def make_cursor(
    tenant: str, filters: ListingFilters, token: bytes, since: datetime | None = None
) -> str:
    """The cursor that continues a listing of ``tenant`` with ``filters`` at ``token``
    (empty: its start), which started at ``since``."""
    data: dict[str, object] = {
        "v": _VERSION,
        "tenant": _digest(b"tenant", tenant.encode()),
        "filters": filters.digest(),
        "token": base64.urlsafe_b64encode(token).decode(),
    }
    if since is not None:
        data["since"] = (since - EPOCH) // timedelta(microseconds=1)
    raw = json.dumps(data, separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return f"{payload}.{_check(payload)}"


def read_cursor(cursor: str, tenant: str, filters: ListingFilters) -> bytes:
    """Temporal's page token a cursor holds (``read_resumed``).

    Raises:
        BadCursor: as ``read_resumed``.
    """
    return read_resumed(cursor, tenant, filters).token


def read_resumed(cursor: str, tenant: str, filters: ListingFilters) -> Resumed:
    """Where a cursor goes on, once it is known to be whole and made for this tenant's
    listing with these filters.

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
        micros = data.get("since")
        if micros is not None and (type(micros) is not int or micros < 0):
            raise TypeError("since is not a time")
        since = None if micros is None else EPOCH + timedelta(microseconds=micros)
    except (ValueError, TypeError, KeyError, OverflowError, binascii.Error, RecursionError) as err:
        # RecursionError: JSON nested past the parser's depth, which a made-up cursor with
        # a fresh check (no secret) may hold; OverflowError: a since past datetime's
        # range; as any other payload that is not a cursor.
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
    return Resumed(token, since)
