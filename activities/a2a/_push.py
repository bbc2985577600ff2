"""Peer push notifications: the record that lets ``psych serve``'s push route end a Run's
wait on a peer task when the peer pushes its update.

When the worker has a ``push_url`` and a peer's card supports push notifications, a call
asks the peer (in ``SendMessage``'s configuration) to push the task's updates to
``<push_url>/<tenant>/<id>`` with a secret token of its own, and keeps, in the fleet's
``TokenStore``, which Run and peer that id belongs to and the secret. The route refuses a
push without that token. A push only says "read the task now": the Run reads it through
its own activity (``psych.a2a.poll``), so a forged push can make it read early, never
make it believe anything.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass

from psych_runtime.activities.tokens import TokenKey, TokenStore

PEER_PUSH_ISSUER = "psych:a2a-peer-push"
"""The ``issuer`` of every peer push record (apart from every OAuth token's key)."""


@dataclass(frozen=True)
class PeerPush:
    """What a push route needs to know of one call's push registration.

    Attributes:
        tenant: the Run's tenant.
        principal: the Run's principal (the Scope the wait is completed as).
        workflow_id: the Run waiting.
        peer: the peer's name in the Spec (the wait's token is ``a2a:<peer>:<task id>``).
        secret: the token the peer must send (``X-A2A-Notification-Token``).
    """

    tenant: str
    principal: str | None
    workflow_id: str
    peer: str
    secret: str


def _key(tenant: str, push_id: str) -> TokenKey:
    return TokenKey(
        tenant=tenant, principal=None, issuer=PEER_PUSH_ISSUER, client_id=push_id, resource="push"
    )


async def keep_push(tokens: TokenStore, push: PeerPush) -> str:
    """Store ``push`` under a new id; the id."""
    push_id = secrets.token_hex(16)
    await tokens.put(_key(push.tenant, push_id), json.dumps(asdict(push)).encode())
    return push_id


async def find_push(tokens: TokenStore, tenant: str, push_id: str) -> PeerPush | None:
    """The registration under ``push_id`` of ``tenant`` (None: none)."""
    record = await tokens.get(_key(tenant, push_id))
    return None if record is None else PeerPush(**json.loads(record))


def new_secret() -> str:
    """A push token: 32 random bytes, hex."""
    return secrets.token_hex(32)
