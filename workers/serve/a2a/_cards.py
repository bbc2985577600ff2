"""The published agents of a version store, and the Agent Card of each.

An agent is served under its Spec name; the Version a new task runs is the latest
published one of that name (by ``published_at``). The store must list its Versions
(``hashes()``, as ``FileVersionStore`` does): the VersionStore port only publishes and
gets by hash, so a store that cannot list serves no cards (every agent is unknown).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
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

from psych_runtime.specs import AgentSpec, Version, VersionStore
from psych_runtime.workflows import is_spawned

SECURITY_SCHEME = "bearer"
"""The name of the one security scheme every card declares."""

_SUMMARY_CHARS = 300


@runtime_checkable
class ListedVersions(Protocol):
    """A version store that can list what it holds."""

    def hashes(self) -> Iterable[str]:
        """The hash of every stored Version."""
        ...


@dataclass
class AgentCatalogue:
    """The agents of a store, read once per Version (Versions are immutable by hash)."""

    store: VersionStore
    _seen: dict[str, tuple[str, datetime] | None] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    """Held while ``_seen`` is read or changed: requests look it up in worker threads."""

    async def latest(self, name: str) -> Version | None:
        """The latest published Version of the agent ``name``; None: no such agent."""
        return await asyncio.to_thread(self._latest, name)

    def _latest(self, name: str) -> Version | None:
        self._scan()
        with self._lock:
            found = [
                (entry[1], version_hash)
                for version_hash, entry in self._seen.items()
                if entry is not None and entry[0] == name
            ]
        if not found:
            return None
        return self.store.get(max(found)[1])

    def _scan(self) -> None:
        if not isinstance(self.store, ListedVersions):
            return
        for version_hash in self.store.hashes():  # read outside the lock: store I/O
            with self._lock:
                if version_hash in self._seen:
                    continue
            version = self.store.get(version_hash)
            spec = version.spec
            # Only agents are A2A agents: a workflow has no conversation to answer in. A
            # spawned child is a model's composition, stored beside the published Versions:
            # served by its name, it could stand in for the agent published under it.
            served = isinstance(spec, AgentSpec) and not is_spawned(spec)
            with self._lock:
                self._seen[version_hash] = (spec.name, version.published_at) if served else None


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
