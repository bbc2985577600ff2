"""ListTasks' page token: where a listing goes on (``Position``, a Run's ``Place`` in the
listing's order), bound to the tenant (a digest), the agent and the status filter it was
made for, and checked (``_list_tasks.py``'s docstring says what is refused)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from a2a.types import TaskState
from a2a.utils.errors import InvalidParamsError

from psych_runtime.specs import Scope
from psych_runtime.workflows import RunSummary

_TOKEN_VERSION = 2
_CHECK_CHARS = 16
AGAIN = "send ListTasks again without a pageToken"

Place = tuple[bool, int, int, str]
"""Where a Run is in the listing's order (Temporal's, newest first), as a key that sorts
so: open Runs first, closed ones by close time (newest first), then by start time (newest
first), then by run id. Times in microseconds since the epoch, negated."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime | None) -> int:
    return 0 if at is None else (at - _EPOCH) // timedelta(microseconds=1)


def place_of(summary: RunSummary) -> Place:
    """The Run's place in the listing's order."""
    closed = summary.closed_at is not None
    return (closed, -_micros(summary.closed_at), -_micros(summary.started_at), summary.run_id)


@dataclass(frozen=True)
class Position:
    """Where a listing goes on: the chunk of the Run listing at ``cursor`` (None: its
    start), past the Runs at or before ``after`` in its order."""

    cursor: str | None
    after: Place | None = None
    """The place the page before ended on, when it ended halfway through a chunk: the
    chunk is read again and its Runs up to that place passed over. A place, not the Run:
    Runs started since come before it, and the Run itself, had it ended since, would be
    further on (closed Runs come after open ones) and going on after it would skip the
    Runs between."""


def _state_name(wanted: TaskState | None) -> str:
    return "any" if wanted is None else TaskState.Name(wanted)


def _check(payload: str) -> str:
    digest = hashlib.sha256(b"psych-a2a-list-tasks\0" + payload.encode())
    return digest.hexdigest()[:_CHECK_CHARS]


def _tenant_digest(tenant: str) -> str:
    """The tenant as a token holds it: a digest, so a token does not show it."""
    return hashlib.sha256(b"psych-a2a-list-tasks-tenant\0" + tenant.encode()).hexdigest()[:32]


def make_token(scope: Scope, agent: str, wanted: TaskState | None, position: Position) -> str:
    """The pageToken that goes on at ``position`` in the listing of ``scope``'s tenant's
    tasks of ``agent`` for ``wanted``."""
    data = {
        "v": _TOKEN_VERSION,
        "tenant": _tenant_digest(scope.tenant),
        "agent": agent,
        "status": _state_name(wanted),
        "cursor": position.cursor,
        "after": None if position.after is None else list(position.after),
    }
    raw = json.dumps(data, separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return f"{payload}.{_check(payload)}"


def read_token(token: str, scope: Scope, agent: str, wanted: TaskState | None) -> Position:
    """Where ``token`` goes on, once it is known to be whole and made for this tenant's
    listing of this agent's tasks with this status filter (the tenant: also when the
    token holds no cursor, which is bound to it too).

    Raises:
        InvalidParamsError: it is not, naming why.
    """
    if token.isascii() and token.isdigit():
        raise InvalidParamsError(
            f"pageToken {token!r} is an offset, a token of an older server's ListTasks, "
            f"which this one no longer takes: {AGAIN}"
        )
    payload, dot, check = token.rpartition(".")
    damaged = (
        "pageToken is damaged or is not one a ListTasks gave (send back the nextPageToken "
        f"it answered, unchanged), or {AGAIN}"
    )
    if not dot or not payload or check != _check(payload):
        raise InvalidParamsError(damaged)
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        version = data["v"]
        if version == 1:
            raise InvalidParamsError(
                "pageToken was given by this server's ListTasks before it changed how a "
                f"page goes on, which it no longer reads: {AGAIN}"
            )
        fields = (version, data["tenant"], data["agent"], data["status"], data["cursor"])
        after = data["after"]
    except (ValueError, TypeError, KeyError, binascii.Error, RecursionError) as err:
        raise InvalidParamsError(damaged) from err
    version, tenant, made_for, status, cursor = fields
    if version != _TOKEN_VERSION or not all(
        isinstance(value, str) for value in (tenant, made_for, status)
    ):
        raise InvalidParamsError(damaged)
    if not (cursor is None or isinstance(cursor, str)):
        raise InvalidParamsError(damaged)
    if not (after is None or _is_place(after)):
        raise InvalidParamsError(damaged)
    if tenant != _tenant_digest(scope.tenant):
        raise InvalidParamsError(
            f"pageToken was given by another tenant's ListTasks, not by one of tenant "
            f"{scope.tenant!r}: {AGAIN}"
        )
    if made_for != agent:
        raise InvalidParamsError(
            f"pageToken was given by agent {made_for!r}'s ListTasks, not {agent!r}'s: {AGAIN}"
        )
    if status != _state_name(wanted):
        raise InvalidParamsError(
            f"pageToken was given for ListTasks with status {status}, not "
            f"{_state_name(wanted)}: ask with the status it was given for, or {AGAIN}"
        )
    return Position(cursor, None if after is None else tuple(after))


def _is_place(value: object) -> bool:
    if not isinstance(value, list) or len(value) != 4:
        return False
    closed, closed_at, started_at, run_id = value
    return (
        type(closed) is bool
        and type(closed_at) is int
        and type(started_at) is int
        and isinstance(run_id, str)
    )
