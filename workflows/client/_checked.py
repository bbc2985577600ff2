"""Which Versions a client has seen pass validation, so each is checked once, not at every
dispatch (bench/ counts Runs started per second); and whether a Version's tenant is
permitted what it uses, which is asked at every dispatch (permits may change, and they are
the tenant's, not the Version's)."""

from __future__ import annotations

import threading
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import (
    NotPermitted,
    PermitsUnavailable,
    Scope,
    TenantPermits,
    ValidationFailed,
    Version,
    context_free_problems,
    permit_problems,
    port_failure,
)
from psych_runtime.workflows.client._asked import TEMPORAL_READ_TIMEOUT, describe_within

MAX_CHECKED = 4096
"""How many hashes a client remembers, the oldest forgotten first (and checked again if it
comes back): a server dispatching for every tenant would otherwise grow them without bound."""


class CheckedVersions:
    """The hashes of Versions whose Spec passed validation in this client."""

    def __init__(self, limit: int = MAX_CHECKED) -> None:
        self._limit = limit
        self._hashes: dict[str, None] = {}  # oldest first
        self._lock = threading.Lock()  # PsychClient.publish runs off the event loop in serve

    def passed(self, version_hash: str) -> None:
        """Remember that the Spec hashing to ``version_hash`` passed validation (publishing's,
        with any context, finds all that ``context_free_problems`` finds)."""
        with self._lock:
            self._hashes.pop(version_hash, None)
            self._hashes[version_hash] = None
            while len(self._hashes) > self._limit:
                del self._hashes[next(iter(self._hashes))]

    def check(self, version: Version) -> Version:
        """``version``, once its Spec passes every check of publishing that needs no worker
        (``context_free_problems``); a hash that passed before is not checked again.

        ``version`` must be verified (its hash is its Spec's): the hash is what is
        remembered.

        Raises:
            ValidationFailed: with every problem and its path.
        """
        if version.hash in self._hashes:
            return version
        problems = context_free_problems(version.spec)
        if problems:
            raise ValidationFailed(problems)
        self.passed(version.hash)
        return version


async def check_permitted(
    permits: TenantPermits | None,
    version: Version,
    scope: Scope,
    keyed: WorkflowHandle[Any, Any] | None = None,
) -> bool:
    """Refuse ``version`` when its Spec uses what ``scope``'s tenant is not permitted, unless
    ``keyed`` (the Run a dispatch's idempotency key names) was started already: a key names
    one dispatch, so its retry answers with that Run, and a permit revoked since refuses
    only a Run not started yet (the answer starts nothing, and the Run is the tenant's).

    Returns:
        True: start the Run; False: ``keyed`` exists and is the answer.

    Raises:
        NotPermitted: naming each tool, server and peer, and the tenant.
        PermitsUnavailable: the port raised or did not answer (``permitted_by``), and no
            Run of ``keyed`` exists (its retry needs no permit, as after a revocation).
    """
    if permits is None:
        return True
    try:
        problems = await permit_problems(version.spec, scope.tenant, permits)
    except Exception as err:  # the port's own failure, whatever it raised
        if await _started(keyed):
            return False
        raise PermitsUnavailable(port_failure(scope.tenant, err)) from err
    if not problems:
        return True
    if await _started(keyed):
        return False
    raise NotPermitted(scope.tenant, problems)


async def _started(keyed: WorkflowHandle[Any, Any] | None) -> bool:
    """Whether the Run a dispatch's idempotency key names (``keyed``) was started already."""
    if keyed is None:
        return False
    try:
        await describe_within(keyed, keyed.id, TEMPORAL_READ_TIMEOUT)
        return True
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return False
