"""A worker's live channel: where its relay listens and what address it advertises.

``run_workers`` starts a ``DeltaRelay`` (activities/live) beside the model role and hands
its hub to the model activities, so every model-call attempt heartbeats the address of its
deltas; followers (``PsychClient.stream(..., deltas=True)``) read them from there. The
default listens on loopback on any free port: one machine needs nothing. A fleet whose
followers run elsewhere sets the address to listen on and the URL they reach it at.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from psych_runtime.activities.live import DeltaHub, DeltaRelay, parse_listen
from psych_runtime.specs import SpecError

DEFAULT_LISTEN = "127.0.0.1:0"
OFF = "off"


@dataclass(frozen=True)
class LiveSettings:
    """Where the worker serves its model calls' deltas.

    Attributes:
        listen: ``host:port`` of the relay (``PSYCH_LIVE_LISTEN``, ``--live-listen``;
            default ``127.0.0.1:0``, loopback, any free port); ``off``: no relay, so no
            deltas are offered (followers see only records).
        url: the base URL followers reach the relay at (``PSYCH_LIVE_URL``,
            ``--live-url``; e.g. ``http://$(POD_IP):7280``); None: derived from ``listen``
            and the bound port, which only works when followers share the address.
    """

    listen: str = DEFAULT_LISTEN
    url: str | None = None

    def __post_init__(self) -> None:
        if self.listen != OFF:
            try:
                parse_listen(self.listen)
            except ValueError as err:
                raise SpecError(f"{err} (or {OFF!r} for no relay)") from None
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise SpecError(
                f"a live relay URL must start with http:// or https://, got {self.url!r}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LiveSettings:
        """``PSYCH_LIVE_LISTEN`` and ``PSYCH_LIVE_URL``.

        Raises:
            SpecError: either is malformed; the message names the variable.
        """
        listen = env.get("PSYCH_LIVE_LISTEN", "").strip() or DEFAULT_LISTEN
        try:
            cls(listen=listen)
        except SpecError as err:
            raise SpecError(f"PSYCH_LIVE_LISTEN: {err}") from None
        try:
            return cls(listen=listen, url=env.get("PSYCH_LIVE_URL", "").strip() or None)
        except SpecError as err:
            raise SpecError(f"PSYCH_LIVE_URL: {err}") from None


@asynccontextmanager
async def serving_deltas(settings: LiveSettings, *, wanted: bool) -> AsyncIterator[DeltaHub | None]:
    """A hub served by a relay while the block runs; None when ``wanted`` is false (no
    model role here) or the relay is ``off``."""
    if not wanted or settings.listen == OFF:
        yield None
        return
    hub = DeltaHub()
    async with DeltaRelay(hub, listen=settings.listen, url=settings.url):
        yield hub
