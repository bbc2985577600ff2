"""PsychClient's listing: a tenant's Runs by their search attributes, and, for suspended
ones, what each waits for (one state query per Run, bounded so one Run no worker answers
for cannot hide the others)."""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import Client, WorkflowExecution
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.contract import ids_from
from psych_runtime.specs import BadCursor, NotFound, Scope, SpecError
from psych_runtime.workflows.client._cursor import ListingFilters, make_cursor, read_cursor
from psych_runtime.workflows.contract._contract import (
    SA_AGENT,
    SA_STATUS,
    SA_SUSPENSION,
    SA_TENANT,
    SA_VERSION,
    RunHandle,
    RunState,
)
from psych_runtime.workflows.contract._records import Pending, RunStatus

LIST_QUERY_SECONDS = 5.0
"""How long ``list(suspended=True)`` waits for each Run's state before it says why not."""
LIST_QUERIES_AT_ONCE = 16
"""How many of those state queries run at once."""
_AGENT = SearchAttributeKey.for_keyword(SA_AGENT)
_VERSION = SearchAttributeKey.for_keyword(SA_VERSION)
_STATUS = SearchAttributeKey.for_keyword(SA_STATUS)
_SUSPENSION = SearchAttributeKey.for_keyword(SA_SUSPENSION)


logger = logging.getLogger(__name__)

FOREIGN_MAX = 1000
"""How many other tenants' Runs a listing reads past (what a loosely matching visibility
store may answer) before it ends short."""
PAGE_MAX = 1000
"""The most Runs asked of Temporal at once (its default ``visibilityMaxPageSize``)."""
_UNREADABLE_TOKEN = (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN)
"""How Temporal refuses a page token it cannot read (the dev server's SQL store: UNKNOWN)."""


@dataclass(frozen=True)
class RunSummary:
    """One Run as listing shows it (from search attributes)."""

    workflow_id: str
    run_id: str
    agent: str | None
    version_hash: str | None
    status: str | None
    started_at: datetime | None
    closed_at: datetime | None
    suspension: str | None = None
    """What a suspended Run waits on (approval, question, external, children)."""
    pending: tuple[Pending, ...] = ()
    """Filled by ``list(suspended=True)``: each item, with its expiry."""
    unreadable: str | None = None
    """Why ``list(suspended=True)`` could not read this Run's pending items (its state is a
    query a worker of its task queue answers: none may be polling); None when read."""


@dataclass(frozen=True)
class RunPage:
    """One page of a listing (``PsychClient.list_page``)."""

    runs: tuple[RunSummary, ...]
    """Its Runs, newest first."""
    next_cursor: str | None
    """Given back to ``list_page`` with the same filters, reads the next page; None on the
    last page. Opaque, and bound to the tenant and the filters it was made for."""


def parse_workflow_id(workflow_id: str) -> tuple[str, str]:
    """``(tenant, run id)`` of a Run's workflow id.

    Raises:
        NotFound: the id is not a psych Run id.
    """
    named = ids_from(workflow_id)
    if named is None:
        raise NotFound(f"{workflow_id!r} is not a psych Run id (psych-<tenant>-<run id>)")
    return named


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _status_of(status: RunStatus | str | None, suspended: bool) -> str | None:
    """The status filter: ``suspended`` lists suspended Runs."""
    if suspended:
        return str(RunStatus.SUSPENDED)
    return None if status is None else str(status)


def _summary(execution: WorkflowExecution, run_id: str) -> RunSummary:
    attributes = execution.typed_search_attributes
    return RunSummary(
        workflow_id=execution.id,
        run_id=run_id,
        agent=attributes.get(_AGENT),
        version_hash=attributes.get(_VERSION),
        status=attributes.get(_STATUS),
        started_at=execution.start_time,
        closed_at=execution.close_time,
        suspension=attributes.get(_SUSPENSION),
    )


class RunListing(abc.ABC):
    """``list`` and ``list_page`` (PsychClient has them)."""

    temporal: Client
    search_attributes: bool

    @abc.abstractmethod
    async def _state(
        self, run: RunHandle | str, scope: Scope, rpc_timeout: timedelta | None
    ) -> RunState:
        """The Run's state (one query)."""

    async def list(
        self,
        *,
        scope: Scope,
        agent: str | None = None,
        version_hash: str | None = None,
        status: RunStatus | str | None = None,
        suspended: bool = False,
        limit: int = 100,
    ) -> list[RunSummary]:
        """The tenant's Runs, newest first, filtered by search attributes: the first
        ``limit`` of them (``list_page`` goes on past them).

        ``suspended=True`` lists only suspended Runs, each with what it waits for, on whom,
        and until when (one state query per Run).

        Raises:
            SpecError: this client starts Runs without search attributes.
        """
        filters = ListingFilters(agent, version_hash, _status_of(status, suspended), suspended)
        page = await self._page(scope, filters, limit, token=None, probe=False)
        return list(page.runs)

    async def list_page(
        self,
        *,
        scope: Scope,
        agent: str | None = None,
        version_hash: str | None = None,
        status: RunStatus | str | None = None,
        suspended: bool = False,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of the tenant's Runs, newest first, as ``list`` filters them; its
        ``next_cursor``, given back with the same filters, reads the next page (None on
        the last). ``limit`` may differ from page to page.

        Raises:
            SpecError: this client starts Runs without search attributes.
            BadCursor: ``cursor`` is damaged, or was made for another tenant's listing or
                one with other filters, or Temporal cannot read the position it holds.
            ValueError: ``limit`` is under 1.
        """
        if limit < 1:
            raise ValueError(f"limit={limit}: a page holds at least one Run")
        filters = ListingFilters(agent, version_hash, _status_of(status, suspended), suspended)
        token = None if cursor is None else read_cursor(cursor, scope.tenant, filters)
        return await self._page(scope, filters, limit, token=token, probe=True)

    async def _page(
        self,
        scope: Scope,
        filters: ListingFilters,
        limit: int,
        *,
        token: bytes | None,
        probe: bool,
    ) -> RunPage:
        """Up to ``limit`` of the tenant's Runs from ``token`` on, and the cursor past them.

        Each page is asked of Temporal for exactly the places still open, and read whole,
        so Temporal's next page token is exactly where this page ends (no Run of a page
        read halfway is skipped or shown twice). ``probe``: when the page is full and
        Temporal has a token, ask whether anything follows it, so the last page says so.
        """
        if not self.search_attributes:
            raise SpecError("listing needs search attributes: this client starts Runs without")
        # The tenant is always the caller's: a cursor says where to go on, never whose
        # Runs (and the workflow id is checked too, below).
        clauses = [f"{SA_TENANT} = {_quote(scope.tenant)}"]
        if filters.agent is not None:
            clauses.append(f"{SA_AGENT} = {_quote(filters.agent)}")
        if filters.version_hash is not None:
            clauses.append(f"{SA_VERSION} = {_quote(filters.version_hash)}")
        if filters.status is not None:
            clauses.append(f"{SA_STATUS} = {_quote(filters.status)}")
        query = " AND ".join(clauses)
        found: list[RunSummary] = []
        # The filter named the tenant; a visibility store that compares it loosely (a
        # case-insensitive collation) must still show no other tenant's Run, and those it
        # answers must not take the caller's places: read on past them, up to a bound.
        foreign = 0
        resumed = token is not None
        while len(found) < limit and foreign < FOREIGN_MAX:
            page = self.temporal.list_workflows(
                query, page_size=min(limit - len(found), PAGE_MAX), next_page_token=token
            )
            try:
                await page.fetch_next_page()
            except RPCError as err:
                if not resumed or err.status not in _UNREADABLE_TOKEN:
                    raise
                # The same query reads without the cursor: the position is what Temporal
                # cannot read (one made up, or a store's token of before an upgrade).
                raise BadCursor(
                    f"Temporal cannot read the position this cursor holds ({err.message}): "
                    "start the listing again without a cursor"
                ) from err
            resumed = False
            for execution in page.current_page or ():
                tenant, run_id = parse_workflow_id(execution.id)
                if tenant != scope.tenant:
                    foreign += 1
                    continue
                found.append(_summary(execution, run_id))
            token = page.next_page_token
            if token is None:
                break
        if foreign:
            # Not the caller's to see, but the operator's to know: the store's tenant match
            # is loose, and past FOREIGN_MAX of them the listing ends short.
            short = len(found) < limit and foreign >= FOREIGN_MAX
            logger.warning(
                "the visibility store answered %d Run(s) of other tenants to a listing of "
                "tenant %r (it matches %s loosely: a case-insensitive collation?)%s",
                foreign,
                scope.tenant,
                SA_TENANT,
                f"; the listing ended short at {len(found)} of up to {limit}" if short else "",
            )
        if token is not None and probe:
            # A full page's token may lead nowhere (Temporal answers one whenever a page
            # is full): look one Run ahead, so the last page has no cursor.
            ahead = self.temporal.list_workflows(query, page_size=1, next_page_token=token)
            await ahead.fetch_next_page()
            if not ahead.current_page and ahead.next_page_token is None:
                token = None
        if filters.suspended:
            # Concurrently, a few at a time: one at a time, a page of Runs whose worker is
            # slow would take LIST_QUERY_SECONDS each.
            queries = asyncio.Semaphore(LIST_QUERIES_AT_ONCE)

            async def with_pending(summary: RunSummary) -> RunSummary:
                async with queries:
                    return await self._with_pending(summary, scope)

            found = list(await asyncio.gather(*(with_pending(summary) for summary in found)))
        cursor = None if token is None else make_cursor(scope.tenant, filters, token)
        return RunPage(runs=tuple(found), next_cursor=cursor)

    async def _with_pending(self, summary: RunSummary, scope: Scope) -> RunSummary:
        """The summary with what the Run waits for; one Run nobody can answer for (no
        worker polls its queue) must not hide the others, so it says why instead."""
        wait = timedelta(seconds=LIST_QUERY_SECONDS)
        try:
            state = await self._state(summary.workflow_id, scope, wait)
        except NotFound as err:
            return dataclasses.replace(summary, unreadable=str(err))
        except RPCError as err:
            if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                why = f"no worker answered within {LIST_QUERY_SECONDS:g} s"
            elif err.status == RPCStatusCode.FAILED_PRECONDITION:
                why = "no worker polls its task queue"
            else:
                why = "Temporal refused the query"
            return dataclasses.replace(summary, unreadable=f"{why} ({err.message})")
        return dataclasses.replace(summary, pending=state.pending)
