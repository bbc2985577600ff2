"""The typed record log of one Run: gapless ``seq``, one Scope, paged for queries.

A record is built as its own typed model (``TurnStarted(**log.stamp(), turn=1)``), so mypy
checks every field of every record at its call site; the log only stamps and keeps them.
Records live in workflow state and are read by queries, so they cost no history.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TypedDict

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.specs import Scope
    from psych_runtime.workflows.contract._carry import Segment
    from psych_runtime.workflows.contract._contract import RecordsPage, RecordsQuery
    from psych_runtime.workflows.contract._records import Record, RunSettled

RECORDS_PAGE_BYTES = 1_000_000
"""Most JSON bytes (UTF-8) of records one ``psych.records`` answer carries (gRPC caps messages,
the server a payload at 2 MB: counted in characters, a page of text of 3 bytes a character
was refused)."""


class Stamp(TypedDict):
    """The fields every record gets from the log."""

    seq: int
    at: datetime
    scope: Scope


class RecordLog:
    """The records of one Run, in order."""

    def __init__(self, scope: Scope, earlier: tuple[Segment, ...] = ()) -> None:
        """Args:
        scope: the Run's Scope, stamped on every record.
        earlier: a continued Run's earlier executions (``_continue.py``): this log goes
            on from the seq after their last.
        """
        self._scope = scope
        self._records: list[Record] = []
        self._earlier = earlier
        self._offset = earlier[-1].last_seq if earlier else 0

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        """This execution's records, in order (an earlier execution's are not here)."""
        return iter(self._records)

    @property
    def last_seq(self) -> int:
        """The highest seq the Run has written, in this execution or an earlier one."""
        return self._offset + len(self._records)

    def stamp(self) -> Stamp:
        """The stamp of the next record (its seq, the workflow's now, the Run's Scope)."""
        return Stamp(seq=self.last_seq + 1, at=workflow.now(), scope=self._scope)

    def add(self, record: Record) -> None:
        """Append a record built with ``stamp()`` (a gap or reuse of a seq is a bug)."""
        assert record.seq == self.last_seq + 1, "records are stamped just before adding"
        self._records.append(record)

    @property
    def settled(self) -> bool:
        """Whether ``run_settled`` (always the last record) has been written."""
        return bool(self._records) and isinstance(self._records[-1], RunSettled)

    def page(self, query: RecordsQuery) -> RecordsPage:
        """Records with ``seq > query.after``: at most ``query.limit`` of them, and fewer
        when they would exceed ``RECORDS_PAGE_BYTES`` (a query answer has a size limit).

        Records an earlier execution holds are not here: asked from before this
        execution's first, the page is empty and ``earlier`` says where to read them.
        """
        start = max(query.after, 0) - self._offset
        page: list[Record] = []
        size = 0
        for record in self._records[start : start + query.limit] if start >= 0 else ():
            size += len(record.model_dump_json().encode())  # bytes, not characters
            if page and size > RECORDS_PAGE_BYTES:
                break
            page.append(record)
        return RecordsPage(
            records=tuple(page),
            last_seq=self.last_seq,
            settled=self.settled,
            earlier=self._earlier,
        )
