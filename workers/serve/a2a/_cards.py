"""The published agents of a version store, and the Agent Card of each.

An agent is served under its Spec name; the Version a new task runs is the latest
published one of that name (by ``published_at``). The store must list its Versions
(``hashes()``, as ``FileVersionStore`` does): the VersionStore port only publishes and
gets by hash, so a store that cannot list serves no cards (every agent is unknown). The
store is listed at most once per ``RESCAN_SECONDS`` (``AgentCatalogue``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

from psych_runtime.specs import (
    AgentSpec,
    NotFound,
    PsychError,
    StoreUnavailable,
    Version,
    VersionStore,
)
from psych_runtime.workflows import is_spawned

SECURITY_SCHEME = "bearer"
"""The name of the one security scheme every card declares."""

_SUMMARY_CHARS = 300

logger = logging.getLogger(__name__)


@runtime_checkable
class ListedVersions(Protocol):
    """A version store that can list what it holds."""

    def hashes(self) -> Iterable[str]:
        """The hash of every stored Version."""
        ...


RESCAN_SECONDS = 2.0
"""How long the catalogue's last listing of the store serves requests before the next one."""


@dataclass
class AgentCatalogue:
    """The agents of a store: each Version read once (Versions are immutable by hash), the
    store listed at most once per ``rescan_seconds``.

    A request reads what the last listing found, so a Version published since (here or by
    another process) is served within ``rescan_seconds``. Listing is the costly part (an S3
    LIST of every Version), hence the interval, not one listing per request.
    """

    store: VersionStore
    rescan_seconds: float = RESCAN_SECONDS
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _read: set[str] = field(default_factory=set, init=False)
    """Every hash the listings found and this catalogue has read."""
    _newest: dict[str, Version] = field(default_factory=dict, init=False)
    """Each served agent's newest Version, by name: read with one ``get``, written only
    under ``_listing``."""
    _listed_at: float | None = field(default=None, init=False)
    _listings: int = field(default=0, init=False)
    """Listings completed: a request that waited for ``_listing`` while one completed
    uses it, instead of listing again (a listing slower than the interval)."""
    _listing: threading.Lock = field(default_factory=threading.Lock, init=False)
    """One listing at a time: a request that finds the last one stale waits for the one
    under way and reads its result. Requests look agents up in worker threads."""

    async def latest(self, name: str) -> Version | None:
        """The latest published Version of the agent ``name``; None: no such agent."""
        return await asyncio.to_thread(self._latest, name)

    def _latest(self, name: str) -> Version | None:
        self._refresh()
        return self._newest.get(name)

    def _refresh(self) -> None:
        if not isinstance(self.store, ListedVersions):
            return
        seen = self._listings
        with self._listing:
            if self._listings != seen:
                return  # listed while this request waited: that listing is fresh enough
            started = self.clock()
            if self._listed_at is not None and started - self._listed_at < self.rescan_seconds:
                return
            for version_hash in self.store.hashes():
                if version_hash not in self._read:
                    self._read_one(version_hash)
            # Only a listing that completed counts: one that failed is tried again.
            self._listed_at = started
            self._listings += 1

    def _read_one(self, version_hash: str) -> None:
        try:
            version = self.store.get(version_hash)
        except NotFound:
            return  # deleted since the listing: the next one will not list it
        except StoreUnavailable:
            # Not damaged: the store did not answer. Served as damaged, an older Version of
            # its agent would stand in and run new tasks; the lookup fails instead (503),
            # and the listing, not counted, is made again by the next request.
            raise
        except PsychError as err:
            # Damaged (or of a newer schema): not served, and said so at every listing
            # until it is mended (publishing its Spec again does), without failing the
            # listing for every other agent. An older Version of its agent is served
            # meanwhile.
            logger.warning("A2A: Version %s is not served: %s", version_hash, err)
            return
        self._take(version)
        self._read.add(version_hash)

    def _take(self, version: Version) -> None:
        spec = version.spec
        # Only agents are A2A agents: a workflow has no conversation to answer in. A
        # spawned child is a model's composition, stored beside the published Versions:
        # served by its name, it could stand in for the agent published under it.
        if not isinstance(spec, AgentSpec) or is_spawned(spec):
            return
        current = self._newest.get(spec.name)
        if current is None or (version.published_at, version.hash) > (
            current.published_at,
            current.hash,
        ):
            self._newest[spec.name] = version


def instructions_summary(instructions: str) -> str:
    """The first paragraph of the instructions, cut at ``_SUMMARY_CHARS``."""
    paragraph = next((p.strip() for p in instructions.split("\n\n") if p.strip()), "")
    flat = " ".join(paragraph.split())
    return flat if len(flat) <= _SUMMARY_CHARS else flat[: _SUMMARY_CHARS - 1] + "…"


def agent_card(version: Version, url: str, *, jwt: bool) -> AgentCard:
    """The Agent Card of ``version`` (an agent's) served at ``url`` (``.../a2a/<name>``).

    Args:
        version: the agent's latest published Version.
        url: where its bindings are: JSON-RPC at ``url/``, HTTP+JSON under ``url``.
        jwt: whether the server accepts JWTs (the bearer scheme then says so).

    Raises:
        ValueError: the Version is a workflow's.
    """
    spec = version.spec
    if not isinstance(spec, AgentSpec):
        raise ValueError(f"{spec.name!r} is a workflow; only agents have Agent Cards")
    summary = instructions_summary(spec.instructions)
    description = spec.description or summary or f"The psych agent {spec.name}."
    skills = [
        AgentSkill(
            id=spec.name,
            name=spec.name,
            description=summary or description,
            tags=["psych-agent"],
            input_modes=["text/plain", "application/json"],
            output_modes=["text/plain"],
        ),
        *(
            AgentSkill(
                id=f"{spec.name}.{skill.name}",
                name=skill.name,
                description=skill.description,
                tags=["psych-skill"],
            )
            for skill in spec.skills
        ),
    ]
    base = url.rstrip("/")
    return AgentCard(
        name=spec.name,
        description=description,
        version=version.hash,
        supported_interfaces=[
            AgentInterface(
                url=f"{base}/",
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            ),
            AgentInterface(
                url=base,
                protocol_binding=TransportProtocol.HTTP_JSON.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            ),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes={
            SECURITY_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    bearer_format="JWT" if jwt else "",
                    description="an API key or a token the operator of this server issued",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SECURITY_SCHEME: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
    )
