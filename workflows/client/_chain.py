"""Reading a continued Run's records as one gapless sequence across its executions.

A Run that continued as new (``_continue.py``) keeps each execution's records in that
execution; ``psych.records`` of the current one answers its own and lists the earlier
ones (``RecordsPage.earlier``: run id and seq range). A closed execution still answers
queries (a worker replays it), so a reader asks the one holding ``after + 1``. Every
reader of records (``PsychClient.records``, ``stream``, ``report``, the CLI) goes through
``chain_page``; a pushed follower (``_follow.py``) asks ``holder`` which execution to
follow from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from psych_runtime.workflows.contract._contract import RecordsPage, RecordsQuery

QueryExecution = Callable[[str | None, RecordsQuery], Awaitable[RecordsPage]]
"""Ask ``psych.records`` of one execution: by Temporal run id, or None for the current."""


def holder(page: RecordsPage, after: int) -> str | None:
    """The run id of the earlier execution that holds record ``after + 1``, from one
    execution's answer (its ``earlier`` segments); None when that execution holds it."""
    if not page.earlier or after >= page.earlier[-1].last_seq:
        return None
    return next(s.run_id for s in page.earlier if s.last_seq > after)


async def chain_page(query_execution: QueryExecution, query: RecordsQuery) -> RecordsPage:
    """Records with ``seq > query.after`` from whichever execution holds them.

    The page's ``last_seq``, ``settled`` and ``earlier`` are the current execution's (the
    whole chain's), so a reader pages on until ``last_seq`` as with a single execution.
    """
    current = await query_execution(None, query)
    run_id = holder(current, query.after)
    if run_id is None:
        return current
    older = await query_execution(run_id, query)
    return RecordsPage(
        records=older.records,
        last_seq=current.last_seq,
        settled=current.settled,
        earlier=current.earlier,
    )
