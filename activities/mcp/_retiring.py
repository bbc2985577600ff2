"""The clients a dynamic registration replaced, kept in its record until they may be deleted
at the authorization server (``_registration.keep_registration`` keeps them,
``_stored_registration.retire_due`` deletes them).

A client replaced by one registered for a wider scope may still be in use: a Run suspended
for consent holds a link built with it, and the person who follows it must reach the
consent page and be sent back, which an authorization server that deleted the client
answers with its own error page instead ("Client ID not found"), so that Run would wait
until its suspension expires. So the replaced client is only marked retiring, with its
RFC 7592 management and when it was replaced, and the first flow that reads the record
after ``RETIRE_GRACE_SECONDS`` deletes it there. Best effort, never a failure of the flow:
a deletion that failed for now (the server unreachable, a 5xx, 408, 425 or 429) stays in the
record, its tries counted, and is tried again by a flow ``retry_seconds`` after, at most
``RETIRE_ATTEMPTS`` tries in all; one the server refused for good (another 4xx: 404 or 401
``invalid_token``, the client already gone or its management no longer good) leaves it.
Each is logged naming the client (``Registering.retire``). Its record keeps it even when
the authorization server forgot the current client (``forget_registration`` keeps a
record with no client, and the client registered next takes it over), and keeps that
forgotten client too (the server's answer may be wrong). A client a flow registered and
dropped (``Registering.discard``, an unusable one in ``Registering.answered``) whose
deletion failed for now is kept so as well, its grace already over (``unused``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

RETIRE_GRACE_SECONDS = 30 * 24 * 3600.0
"""How long a replaced client stays registered (30 days) before a flow deletes it.

What bounds a consent started with it: the Run's suspension for it expires after its
Spec's ``suspension.approval_expires_seconds`` (a day by default; the Spec sets no upper
bound); its parked flow and the callback's ``state`` index have no lifetime of their own
(they are forgotten by the exchange, or when the wait ends). So no bound holds for every
Spec: this one covers the default thirtyfold, and a Spec waiting longer than it for a
consent may find the client deleted (its person then sees the authorization server's
error page, as before 12-06). The deleting flow cannot tell: the registration is shared
by every Spec of the tenant using the server, the parked flow records no expiry, and the
store lists no parked flows. The bound is told to operators (``docs/guides/mcp.md``: an
``approval_expires_seconds`` at most this for a Spec with a dynamically registered
server). Grants issued to the client live as long (deleting it ends them, RFC 7592
2.3)."""


RETIRE_ATTEMPTS = 8
"""How many times a replaced client's deletion is tried before it is given up (logged as
a warning naming the client, left registered): with ``retry_seconds`` between tries,
about five days and a quarter of an authorization server failing every deletion."""

RETRY_SECONDS = 3600.0
"""How long after a failed deletion it is tried again, doubled at each failure."""


def retry_seconds(attempts: int) -> float:
    """How long after the ``attempts``-th failed try (from 1) of a deletion the next may be
    made: an hour, doubling."""
    return RETRY_SECONDS * 2.0 ** (attempts - 1)


class Managed(BaseModel):
    """The RFC 7592 management of a stored registration's client (``Management``)."""

    uri: str
    token: str = Field(repr=False)


class Retiring(BaseModel):
    """A client a registration replaced, to be deleted at the authorization server once
    ``RETIRE_GRACE_SECONDS`` have passed since ``replaced_at`` (``time.time()`` seconds,
    the clock of the worker that replaced it); ``attempts`` deletions of it failed for
    now, the last at ``tried_at`` (an earlier build's record has neither, and an earlier
    build ignores them). ``client_id`` is empty for an unusable client whose registration
    answer named none: its management, which its deletion uses, tells it apart
    (``_stored_registration.put_back``)."""

    client_id: str
    management: Managed
    replaced_at: float
    attempts: int = 0
    tried_at: float | None = None


def unused(client_id: str, uri: str, token: str, now: float) -> Retiring:
    """``client_id``, a client a flow registered and no consent used (left unused: another
    worker's registration was stored first; or one the flow cannot use), whose deletion
    with its management (``uri``, ``token``) failed for now at ``now``: kept to be tried
    again as a replaced client is, dated a grace back (no consent link was built with it:
    no grace to wait, only ``retry_seconds``; an earlier build, which ignores its tries,
    deletes it at its next flow)."""
    management = Managed(uri=uri, token=token)
    replaced_at = now - RETIRE_GRACE_SECONDS
    return Retiring(
        client_id=client_id,
        management=management,
        replaced_at=replaced_at,
        attempts=1,
        tried_at=now,
    )


def is_due(retiring: Retiring, now: float) -> bool:
    """Whether ``retiring`` may be deleted at ``now``. One dated after ``now`` (a worker
    whose clock runs ahead) waits: deleting late costs a client left registered longer,
    deleting early a consent stranded. One whose deletion failed waits ``retry_seconds``
    from its last try."""
    if now - retiring.replaced_at < RETIRE_GRACE_SECONDS:
        return False
    tried = retiring.tried_at
    return tried is None or now - tried >= retry_seconds(max(retiring.attempts, 1))


def redated(retiring: Retiring, now: float) -> Retiring:
    """``retiring``, dated ``now`` when its date is more than ``RETIRE_GRACE_SECONDS``
    ahead of ``now`` (replaced by a worker whose clock ran that far ahead, years say: it
    would wait as long, a client left registered with its grants). When it was really
    replaced is unknown, so its grace runs from the first flow that reads it so: deleted
    no earlier than a grace after, no consent started with it since is stranded. Its last
    failed try (``tried_at``) more than its ``retry_seconds`` ahead is dated ``now`` too
    (tried by a worker whose clock ran ahead: its next try would wait as long, never
    given up): tried again ``retry_seconds`` after the first flow that reads it so."""
    update = dict[str, float]()
    if retiring.replaced_at - now > RETIRE_GRACE_SECONDS:
        update["replaced_at"] = now
    tried = retiring.tried_at
    if tried is not None and tried - now > retry_seconds(max(retiring.attempts, 1)):
        update["tried_at"] = now
    return retiring.model_copy(update=update) if update else retiring
