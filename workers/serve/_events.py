"""Following a Run over Server-Sent Events: what is sent, its ids, and resuming.

One function yields what a follower is sent (``run_events``: Records, and the deltas of
the model call in flight); the route turns each item into one event:

- a Record: ``event: record``, ``id: <seq>``, or ``<seq>/<call>/<n>`` once a delta was
  sent: the Record's seq and the last delta (or drop) sent before it, which a Record does
  not supersede (a follower joining mid-call gets the call's deltas before the Records it
  catches up on, and a steer is recorded while the call streams);
- a ``TokenDelta``: ``event: delta``, ``id: <seq>/<call>/<n>``, where ``seq`` is the last
  Record's seq sent before it, ``call`` the attempt (``<turn>.<activity id>#<attempt>``:
  it has '#' but never '/'; the turn first, as each execution of a continued Run numbers
  its activities anew) and ``n`` its position in the attempt;
- a ``DeltasDropped``: ``event: deltas_dropped``, ``id: <seq>/<call>/dropped``: nothing of
  that attempt is left to send (a Record after it keeps it in its id, as after a delta). A
  number would not do: a follower that cannot read the attempt's relay any more (its worker
  died) knows neither how many pieces it had nor whether the stream saw its drop;
- ``event: end`` once the Run settled (no id: resuming after it starts after the last
  Record, and a settled Run's stream ends again at once).

A reconnecting client sends the last id it saw (``Last-Event-ID``, or ``?after=``), parsed
by ``parse_event_id`` into an ``EventPosition``: it is sent the Records after ``seq`` and,
of the attempt ``call``, the deltas after ``n`` (and its drop, if it was dropped meanwhile),
or nothing more of it after ``dropped``; nothing is lost or sent twice. An id whose ``seq``
the Run has not written is refused once a worker has said how far the Run is
(``UnknownPosition``: the route's ``unknown-event-id`` error event), never waited on.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from psych_runtime.specs import Scope
from psych_runtime.workflows import DeltasDropped, PsychClient, Record, TokenDelta

EventItem = Record | TokenDelta | DeltasDropped
"""What a follower of a Run is sent."""

DROPPED = "dropped"
"""The last part of a ``deltas_dropped`` event's id, in place of a delta's position."""

_ID = re.compile(rf"^(?P<seq>\d{{1,18}})(?:/(?P<call>[^/]+)/(?P<n>\d{{1,18}}|{DROPPED}))?$")


@dataclass(frozen=True)
class EventPosition:
    """Where a follower is: the last Record's seq, and the last delta sent after it."""

    seq: int = 0
    delta: tuple[str, int] | None = None
    """``(call, n)`` of the last delta sent after Record ``seq`` (``n`` 0 when ``dropped``);
    None: none."""
    dropped: bool = False
    """Whether that last delta event was the drop of the attempt ``call``."""

    def __str__(self) -> str:
        """The event id naming this position."""
        if self.delta is None:
            return str(self.seq)
        call, n = self.delta
        return f"{self.seq}/{call}/{DROPPED if self.dropped else n}"


def parse_event_id(text: str) -> EventPosition:
    """The position an event id (``<seq>``, ``<seq>/<call>/<n>`` or
    ``<seq>/<call>/dropped``) names.

    Raises:
        ValueError: the id has neither shape (the message says which shapes it may have).
    """
    found = _ID.match(text.strip())
    if found is None:
        raise ValueError(
            f"event id {text!r} is neither '<seq>' nor '<seq>/<call>/<n>' nor "
            f"'<seq>/<call>/{DROPPED}' (seq and n are whole numbers)"
        )
    seq = int(found["seq"])
    if found["call"] is None:
        return EventPosition(seq)
    if found["n"] == DROPPED:
        return EventPosition(seq, (found["call"], 0), dropped=True)
    return EventPosition(seq, (found["call"], int(found["n"])))


@dataclass
class EventIds:
    """The ids of the events of one stream, from the position it resumed at."""

    position: EventPosition

    def next_id(self, item: EventItem) -> str:
        """The id of ``item``, the next event sent."""
        seq = self.position.seq
        if isinstance(item, TokenDelta):
            self.position = EventPosition(seq, (item.call, item.n))
        elif isinstance(item, DeltasDropped):
            self.position = EventPosition(seq, (item.call, 0), dropped=True)
        else:
            # The deltas sent stay sent: resuming after this Record must not send them
            # again. (Once their call's Record is in, they are skipped anyway; naming
            # them costs a few bytes of id.)
            self.position = EventPosition(
                item.seq, self.position.delta, dropped=self.position.dropped
            )
        return str(self.position)


async def run_events(
    client: PsychClient, run_id: str, *, scope: Scope, after: EventPosition
) -> AsyncGenerator[EventItem, None]:
    """What a follower of the Run is sent from ``after`` on, until the Run settles: the
    Records after ``after.seq`` and, between them, the deltas of the model call in flight
    (of the attempt ``after.delta`` names, only those after its ``n``, and nothing once
    its drop was sent)."""
    after_delta = after.delta
    dropped = None
    if after.dropped and after_delta is not None:
        dropped = after_delta[0]
        after_delta = (dropped, sys.maxsize)  # none of its pieces
    async for item in client.stream(
        run_id, scope=scope, after=after.seq, deltas=True, after_delta=after_delta
    ):
        if isinstance(item, DeltasDropped) and item.call == dropped:
            continue  # sent already: the stream resumes from its id
        yield item
