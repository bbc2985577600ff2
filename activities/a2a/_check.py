"""``check_peers``: what each A2A peer of a Spec offers right now, for ``psych validate
--check-connections`` and ``publish``: its Agent Card fetched through the egress port (as
a worker would for a Run of the Scope, credential and all), its skills narrowed by
``allow``, and every ``allow`` entry that matches none of them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from psych_runtime.activities.a2a._peers import Peers, PeerUnavailable, connect
from psych_runtime.activities.a2a._settings import A2aSettings
from psych_runtime.activities.egress import Egress
from psych_runtime.activities.secrets import SecretResolver
from psych_runtime.specs import A2APeer, Scope, narrow


@dataclass(frozen=True)
class PeerCheck:
    """One peer's answer to a connection check.

    Attributes:
        peer: the peer as the Spec declares it.
        error: why its card could not be had (credential named, never its value); None
            when it answered.
        offered: the card's skill ids (sorted; empty when it did not answer).
        granted: what ``allow`` leaves of them: the skills a Run would offer its model.
        unmatched: ``allow`` entries that name no skill of the card.
    """

    peer: A2APeer
    error: str | None
    offered: tuple[str, ...] = ()
    granted: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()


async def check_peers(
    peers: Sequence[A2APeer],
    *,
    scope: Scope,
    secrets: SecretResolver | None,
    egress: Egress,
    settings: A2aSettings | None = None,
) -> list[PeerCheck]:
    """Fetch every peer's card (concurrently, each bounded by ``card_timeout_seconds``)
    and judge its ``allow`` against the skills it offers; one answer per peer, in order."""
    settings = settings if settings is not None else A2aSettings()
    # A pool of its own: a check never answers from (or fills) a worker's cache.
    pool = Peers(egress, card_ttl_seconds=settings.card_ttl_seconds, max_entries=len(peers) or 1)

    async def one(peer: A2APeer) -> PeerCheck:
        try:
            connection = await connect(peer, scope, secrets)
            fetched, _ = await pool.card(
                peer, scope, connection, fetch_seconds=settings.card_timeout_seconds
            )
            # The card must also name an interface a Run can talk to.
            pool.transport(scope, connection, fetched.card)
        except PeerUnavailable as err:
            return PeerCheck(peer=peer, error=str(err))
        offered = tuple(sorted({skill.id for skill in fetched.card.skills}))
        return PeerCheck(
            peer=peer,
            error=None,
            offered=offered,
            granted=narrow(offered, allow=peer.allow),
            unmatched=tuple(e for e in peer.allow if not narrow(offered, allow=(e,))),
        )

    return list(await asyncio.gather(*(one(peer) for peer in peers)))
