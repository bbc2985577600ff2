"""The listing's ``waiting_on`` filter (pure, no server): the ``PsychSuspension`` values it
matches, a reason it does not know refused by name, and a cursor made before the filter
existed still bound to the same filters."""

from __future__ import annotations

import pytest

from psych_runtime.specs import BadCursor, Scope
from psych_runtime.workflows.client._cursor import (
    ListingFilters,
    make_cursor,
    read_cursor,
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
