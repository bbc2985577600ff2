"""The listing's ``waiting_on`` filter (pure, no server): the ``PsychSuspension`` values it
matches, a reason it does not know refused by name, and a cursor made before the filter
existed still bound to the same filters."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from psych_runtime.specs import BadCursor, Scope
from psych_runtime.workflows.client._cursor import (
    EPOCH,
    ListingFilters,
    Resumed,
    _check,
    ceil_micros,
    continued_since,
    make_cursor,
    read_cursor,
    read_resumed,
    waiting_values,
)
from psych_runtime.workflows.client._listing import _filters


def test_waiting_values_are_every_set_of_reasons_holding_one_asked_for() -> None:
    values = waiting_values({"approval", "question"})
    # Sorted and comma-joined, as a Run's ``Suspensions.reasons`` writes them.
    for value in ("question", "approval", "approval,question", "children,question"):
        assert value in values
    for value in ("external", "children", "authorization,children,external"):
        assert value not in values
    # Of the 31 sets of the 5 reasons, all but the 7 without approval or question.
    assert len(values) == 24 and len(set(values)) == 24
    assert waiting_values(()) == ()


def test_a_reason_the_listing_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="waiting_on='asleep': not a suspension reason"):
        _filters("support", None, None, False, ["question", "asleep"])
    filters = _filters("support", None, "suspended", False, ["question", "approval"])
    assert filters.waiting_on == ("approval", "question")


def test_a_cursor_made_before_waiting_on_still_reads() -> None:
    # Digests of these filters as the cursor format had them before ``waiting_on``: a
    # cursor given out then (a listing under way across an upgrade) is still its own.
    assert ListingFilters("support", None, "suspended", True).digest() == (
        "6f93e0c3e9966cf27ba8ac5587f778b7"
    )
    assert ListingFilters("support", "abc", None, False).digest() == (
        "6e836848c00124bcb9a804c9b9226fa1"
    )
    scope = Scope(tenant="acme")
    waiting = ListingFilters("support", None, "suspended", False, ("question",))
    cursor = make_cursor(scope.tenant, waiting, b"position")
    assert read_cursor(cursor, scope.tenant, waiting) == b"position"
    with pytest.raises(BadCursor, match="other filters"):
        read_cursor(cursor, scope.tenant, ListingFilters("support", None, "suspended", False))


def test_a_cursor_keeps_when_its_listing_started_and_one_made_before_reads_on() -> None:
    filters = ListingFilters("support", None, None, False)
    since = datetime(2026, 12, 6, 13, 0, 0, 123456, tzinfo=UTC)
    cursor = make_cursor("acme", filters, b"position", since)
    assert read_resumed(cursor, "acme", filters) == Resumed(b"position", since)
    assert continued_since(since) == (
        "(ExecutionStatus != 'ContinuedAsNew' OR CloseTime > '2026-12-06T13:00:00.123456Z')"
    )
    # A cursor made before it held no time: it reads on, leaving out every continued one.
    older = make_cursor("acme", filters, b"position")
    assert read_resumed(older, "acme", filters) == Resumed(b"position", None)
    assert continued_since(None) == "ExecutionStatus != 'ContinuedAsNew'"
    # A time that is none (the check is no secret: one can be made up) is refused.
    for forged in ('"soon"', "-1", "1e30", str(10**30)):
        raw = json.dumps({"v": 1, "tenant": "", "filters": "", "token": ""})
        raw = raw[:-1] + f', "since": {forged}}}'
        payload = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
        with pytest.raises(BadCursor, match="does not read as one"):
            read_resumed(f"{payload}.{_check(payload)}", "acme", filters)


def test_a_listing_starts_just_past_a_close_time_temporal_answered() -> None:
    # The close of the execution that continued as new last, rounded up to the microsecond
    # a cursor keeps: that execution is not past it (``CloseTime >``), whatever precision
    # the visibility store keeps, and one closed a microsecond later is.
    closed = datetime(2026, 12, 6, 13, 0, 0, 123456, tzinfo=UTC)
    stamp = Timestamp(seconds=int(closed.timestamp()), nanos=123_456_000)
    assert ceil_micros(stamp) == closed
    assert ceil_micros(Timestamp(seconds=stamp.seconds, nanos=123_456_001)) == closed.replace(
        microsecond=123457
    )
    assert ceil_micros(Timestamp(seconds=stamp.seconds, nanos=999_999_999)) == closed.replace(
        second=1, microsecond=0
    )
    # A tenant none of whose executions went on: every one that goes on is kept.
    filters = ListingFilters("support", None, None, False)
    cursor = make_cursor("acme", filters, b"", EPOCH)
    assert read_resumed(cursor, "acme", filters) == Resumed(b"", EPOCH)
    assert continued_since(EPOCH).endswith("OR CloseTime > '1970-01-01T00:00:00Z')")
