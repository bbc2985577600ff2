"""The event ids of a Run's stream and resuming from them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from psych_runtime.specs import Scope
from psych_runtime.workers.serve import EventPosition, parse_event_id
from psych_runtime.workers.serve._events import EventIds
from psych_runtime.workflows import DeltasDropped, TokenDelta, TurnStarted

CALL = "psych-acme-abc/7#1"[len("psych-acme-abc/") :]  # an activity id and its attempt


def turn(seq: int) -> TurnStarted:
    return TurnStarted(seq=seq, at=datetime.now(UTC), scope=Scope(tenant="acme"), turn=1)


def test_both_id_shapes_parse_and_anything_else_is_refused() -> None:
    assert parse_event_id("12") == EventPosition(12)
    assert parse_event_id("12/7#1/3") == EventPosition(12, ("7#1", 3))
    for bad in ("", "x", "-1", "12/7#1", "12/a/b/3", "12/7#1/n", "12/dropped", "12/7#1/drop"):
        with pytest.raises(ValueError, match="neither"):
            parse_event_id(bad)


def test_ids_follow_records_deltas_and_drops_and_resume_where_they_left() -> None:
    ids = EventIds(EventPosition())
    sent = [
        ids.next_id(turn(1)),
        ids.next_id(TokenDelta(call=CALL, turn=1, n=1, text="He")),
        ids.next_id(TokenDelta(call=CALL, turn=1, n=2, text="llo")),
        ids.next_id(DeltasDropped(call=CALL, turn=1, reason="lost")),
        ids.next_id(turn(2)),
    ]
    # A Record keeps the last delta sent in its id: resuming after it must not send the
    # call's deltas again (they may come before Records: a steer mid-call, a catch-up).
    # A drop's id says it was sent, not a number: nothing of its attempt is left to send.
    dropped = f"1/{CALL}/dropped"
    assert sent == ["1", f"1/{CALL}/1", f"1/{CALL}/2", dropped, f"2/{CALL}/dropped"]
    resumed = EventIds(parse_event_id(f"1/{CALL}/2"))
    assert resumed.next_id(DeltasDropped(call=CALL, turn=1, reason="lost")) == dropped
    assert parse_event_id(sent[-1]) == EventPosition(2, (CALL, 0), dropped=True)
    assert str(parse_event_id(sent[-1])) == sent[-1]
    mid_call = EventIds(EventPosition())
    assert [
        mid_call.next_id(TokenDelta(call=CALL, turn=3, n=1, text="a")),
        mid_call.next_id(turn(1)),
        mid_call.next_id(TokenDelta(call=CALL, turn=3, n=2, text="b")),
        mid_call.next_id(turn(2)),
    ] == [f"0/{CALL}/1", f"1/{CALL}/1", f"1/{CALL}/2", f"2/{CALL}/2"]
