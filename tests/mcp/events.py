"""An in-memory event store for ``tests.mcp.server --resumable``: what lets a streamable-HTTP
client resume a request's event stream (a GET with ``Last-Event-ID``) after the server
closed it (the ``dropped`` tool)."""

from __future__ import annotations

import itertools

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage


class MemoryEvents(EventStore):
    """Every event of the process's streams, in order, ids ``<stream>:<n>``."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, JSONRPCMessage | None]] = []
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = f"{stream_id}:{next(self._ids)}"
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        ids = [event[0] for event in self._events]
        if last_event_id not in ids:
            return None
        at = ids.index(last_event_id)
        stream = self._events[at][1]
        for event_id, stream_id, message in self._events[at + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream
