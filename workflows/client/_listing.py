"""PsychClient's listing: a tenant's Runs by their search attributes, and, for suspended
ones, what each waits for (one state query per Run, bounded so one Run no worker answers
for cannot hide the others)."""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.converter import decode_typed_search_attributes
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.contract import ids_from
from psych_runtime.specs import NotFound, Scope, SpecError
from psych_runtime.workflows.client._asked import TemporalCancelled, TemporalUnanswered
from psych_runtime.workflows.client._cursor import (
    EPOCH,
    ListingFilters,
    Resumed,
    ceil_micros,
    continued_since,
    make_cursor,
    read_resumed,
    waiting_values,
)
from psych_runtime.workflows.client._read_past import read_past
from psych_runtime.workflows.client._unsettled import (
    OPEN_NAMES,
    UNSETTLED,
    UNSETTLED_SHOWN,
    closed_unsettled,
)
from psych_runtime.workflows.client._visibility import Visibility, listing_read
from psych_runtime.workflows.contract._contract import (
    SA_AGENT,
    SA_STATUS,
    SA_SUSPENSION,
    SA_TENANT,
    SA_VERSION,
    RunHandle,
    RunState,
)
from psych_runtime.workflows.contract._records import Pending, RunStatus, SuspensionReason

LIST_QUERY_SECONDS = 5.0
"""How long ``list(suspended=True)`` waits for each Run's state before it says why not."""
LIST_QUERIES_AT_ONCE = 16
"""How many of those state queries run at once."""
_AGENT = SearchAttributeKey.for_keyword(SA_AGENT)
_VERSION = SearchAttributeKey.for_keyword(SA_VERSION)
_STATUS = SearchAttributeKey.for_keyword(SA_STATUS)
_SUSPENSION = SearchAttributeKey.for_keyword(SA_SUSPENSION)


logger = logging.getLogger(__name__)

_FIRST = "the first request (where it starts)"
"""What a listing asks first (``_started``), as ``TemporalUnanswered`` names it."""

FOREIGN_MAX = 1000
"""How many rows a listing reads past before it ends short: other tenants' Runs (what a
loosely matching visibility store may answer) and workflows that are not psych Runs (their
ids are not ``psych-<tenant>-<run id>``) though they carry the tenant's ``PsychTenant``."""
PAGE_MAX = 1000
"""The most Runs asked of Temporal at once (its default ``visibilityMaxPageSize``)."""


@dataclass(frozen=True)
class RunSummary:
    """One Run as listing shows it (from search attributes)."""

    workflow_id: str
    run_id: str
    agent: str | None
    version_hash: str | None
    status: str | None
    """Its ``PsychStatus``; ``failed`` when its workflow execution closed without the Run
    settling (``closed_as`` says how)."""
    started_at: datetime | None
    closed_at: datetime | None
    suspension: str | None = None
    """What a suspended Run waits on (approval, question, external, children)."""
    closed_as: str | None = None
    """How Temporal closed the Run's workflow execution when it closed without the Run
    settling (``terminated``, ``timed_out``, ...: an operator's terminate, an execution
    timeout, a reset): the Run is then shown ``failed`` (``UNSETTLED_SHOWN``) and waits on
    nothing; None otherwise."""
    pending: tuple[Pending, ...] = ()
    """Filled by ``list(suspended=True)``: each item, with its expiry."""
    unreadable: str | None = None
    """Why ``list(suspended=True)`` could not read this Run's pending items (its state is a
    query a worker of its task queue answers: none may be polling); None when read."""
    execution: str | None = None
    """Temporal's run id of the workflow execution listed. A Run an operator reset after
    it settled is listed twice under its workflow id: the execution it settled in
    (closed) and the one it runs on in; this tells them apart, and reads the closed one's
    result (``PsychClient.result(execution=)``) without waiting for the other.

    A Run (or any workflow under the tenant's ``psych-<tenant>-`` ids and search
    attributes, one started by hand with the ``temporal`` CLI too) that continued as new
    after the listing's first page was read is listed on the pages after as the execution
    it continued from: this is that execution's run id, closed ``ContinuedAsNew``, and the
    summary shows its search attributes as they were when it continued (``status``,
    ``suspension``: what it was then, terminal or not, not what the execution it goes on in
    says now); a listing from the start shows the execution it goes on in
    (``continued_since``)."""


@dataclass(frozen=True)
class RunPage:
    """One page of a listing (``PsychClient.list_page``)."""

    runs: tuple[RunSummary, ...]
    """Its Runs, newest first."""
    next_cursor: str | None
    """Given back to ``list_page`` with the same filters, reads the next page; None on the
    last page. Opaque, and bound to the tenant and the filters it was made for."""
    cursor: str | None = None
    """The cursor that reads this page again (a first page's: the listing's start)."""


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


def _filters(
    agent: str | None,
    version_hash: str | None,
    status: RunStatus | str | None,
    suspended: bool,
    waiting_on: Collection[SuspensionReason | str],
) -> ListingFilters:
    """What a listing (or count) was asked for.

    Raises:
        ValueError: ``waiting_on`` names something that is not a suspension reason.
    """
    reasons: set[str] = set()
    for reason in waiting_on:
        try:
            reasons.add(str(SuspensionReason(reason)))
        except ValueError:
            known = ", ".join(r.value for r in SuspensionReason)
            raise ValueError(
                f"waiting_on={reason!r}: not a suspension reason (one of {known})"
            ) from None
    return ListingFilters(
        agent, version_hash, _status_of(status, suspended), suspended, tuple(sorted(reasons))
    )


def _utc(
    info: WorkflowExecutionInfo, field: Literal["start_time", "close_time"]
) -> datetime | None:
    """The time ``field`` of ``info`` holds (as the SDK's ``WorkflowExecution``: UTC)."""
    if not info.HasField(field):
        return None
    stamp: Timestamp = getattr(info, field)
    return stamp.ToDatetime().replace(tzinfo=UTC)


def _summary(info: WorkflowExecutionInfo, run_id: str) -> RunSummary:
    attributes = decode_typed_search_attributes(info.search_attributes)
    status = attributes.get(_STATUS)
    suspension = attributes.get(_SUSPENSION)
    closed_as = closed_unsettled(status, info.status)
    if closed_as is not None:
        # Its last PsychStatus is not how it ended: Temporal closed it unsettled.
        status, suspension = str(UNSETTLED_SHOWN), None
    return RunSummary(
        workflow_id=info.execution.workflow_id,
        run_id=run_id,
        agent=attributes.get(_AGENT),
        version_hash=attributes.get(_VERSION),
        status=status,
        started_at=_utc(info, "start_time"),
        closed_at=_utc(info, "close_time"),
        suspension=suspension,
        closed_as=closed_as,
        execution=info.execution.run_id or None,
    )


def _status_clause(status: str) -> str:
    """The visibility query's clause of a status filter: a Run shows the status it lists
    by (``_summary``), so one its closed execution left unsettled lists as ``failed``,
    not by its last ``PsychStatus``."""
    if status in UNSETTLED:
        return f"{SA_STATUS} = {_quote(status)} AND ExecutionStatus IN {OPEN_NAMES}"
    if status == UNSETTLED_SHOWN:
        unsettled = ", ".join(_quote(value) for value in UNSETTLED)
        return (
            f"({SA_STATUS} = {_quote(status)} OR ({SA_STATUS} IN ({unsettled}) "
            f"AND ExecutionStatus NOT IN {OPEN_NAMES}))"
        )
    return f"{SA_STATUS} = {_quote(status)}"


class RunListing(abc.ABC):
    """``list`` and ``list_page`` (PsychClient has them)."""

    temporal: Client
    search_attributes: bool
    _visibility: Visibility

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
        waiting_on: Collection[SuspensionReason | str] = (),
        limit: int = 100,
    ) -> list[RunSummary]:
        """The tenant's Runs, newest first, filtered by search attributes: the first
        ``limit`` of them (``list_page`` goes on past them).

        ``suspended=True`` lists only suspended Runs, each with what it waits for, on whom,
        and until when (one state query per Run). ``waiting_on`` lists only Runs with a
        pending item (their own or a child Run's) of one of these reasons (by the
        ``PsychSuspension`` search attribute, no query).

        Raises:
            SpecError: this client starts Runs without search attributes.
            TemporalUnanswered: Temporal did not answer one of its requests within
                ``TEMPORAL_READ_TIMEOUT`` (its ``why`` names the tenant's listing).
            ValueError: ``waiting_on`` names something that is not a suspension reason.
        """
        filters = _filters(agent, version_hash, status, suspended, waiting_on)
        page = await self._page(scope, filters, limit, resume=None, probe=False)
        return list(page.runs)

    async def list_page(
        self,
        *,
        scope: Scope,
        agent: str | None = None,
        version_hash: str | None = None,
        status: RunStatus | str | None = None,
        suspended: bool = False,
        waiting_on: Collection[SuspensionReason | str] = (),
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of the tenant's Runs, newest first, as ``list`` filters them; its
        ``next_cursor``, given back with the same filters, reads the next page (None on
        the last). ``limit`` may differ from page to page.

        Raises:
            SpecError: this client starts Runs without search attributes.
            TemporalUnanswered: Temporal did not answer one of its requests within
                ``TEMPORAL_READ_TIMEOUT`` (its ``why`` names the tenant's listing).
            BadCursor: ``cursor`` is damaged, or was made for another tenant's listing or
                one with other filters, or Temporal cannot read the position it holds.
            ValueError: ``limit`` is under 1, or ``waiting_on`` names something that is
                not a suspension reason.
        """
        if limit < 1:
            raise ValueError(f"limit={limit}: a page holds at least one Run")
        filters = _filters(agent, version_hash, status, suspended, waiting_on)
        at = None if cursor is None else read_resumed(cursor, scope.tenant, filters)
        return await self._page(scope, filters, limit, resume=at, probe=True)

    async def count(
        self,
        *,
        scope: Scope,
        agent: str | None = None,
        version_hash: str | None = None,
        status: RunStatus | str | None = None,
        suspended: bool = False,
        waiting_on: Collection[SuspensionReason | str] = (),
    ) -> int:
        """How many Runs ``list_page`` with these filters pages through, as Temporal's
        visibility counts them now (``CountWorkflowExecutions`` of the same query; one
        request, however many Runs). A store that matches the tenant loosely (see
        ``FOREIGN_MAX``) counts the other tenants' Runs it would answer, and every store
        the workflows with the tenant's attributes that are not psych Runs, which a
        listing reads past and logs.

        Raises:
            SpecError: this client starts Runs without search attributes.
            TemporalUnanswered: Temporal did not answer one of its requests within
                ``TEMPORAL_READ_TIMEOUT`` (its ``why`` names the tenant's listing).
            ValueError: ``waiting_on`` names something that is not a suspension reason.
        """
        filters = _filters(agent, version_hash, status, suspended, waiting_on)
        wait = self._visibility.rpc_timeout
        query = self._query(scope, filters, None)
        asked = self.temporal.count_workflows(query, rpc_timeout=wait)
        return (await listing_read(scope.tenant, "the count", wait, asked)).count

    def _query(self, scope: Scope, filters: ListingFilters, since: datetime | None) -> str:
        """The visibility query of the tenant's Runs with ``filters``, of a listing that
        started at ``since`` (``continued_since``)."""
        if not self.search_attributes:
            raise SpecError("listing needs search attributes: this client starts Runs without")
        # The tenant is always the caller's: a cursor says where to go on, never whose
        # Runs (and the workflow id is checked too, in ``_page``).
        clauses = [f"{SA_TENANT} = {_quote(scope.tenant)}"]
        # A Run that continued as new is one Run in several executions under its workflow
        # id: visibility holds each, the ones it went on from closed `ContinuedAsNew`.
        clauses.append(continued_since(since))
        if filters.agent is not None:
            clauses.append(f"{SA_AGENT} = {_quote(filters.agent)}")
        if filters.version_hash is not None:
            clauses.append(f"{SA_VERSION} = {_quote(filters.version_hash)}")
        if filters.status is not None:
            clauses.append(_status_clause(filters.status))
        if filters.waiting_on:
            values = ", ".join(_quote(value) for value in waiting_values(filters.waiting_on))
            # A closed execution waits on nothing, whatever its attribute still says.
            clauses.append(f"{SA_SUSPENSION} IN ({values}) AND ExecutionStatus IN {OPEN_NAMES}")
        return " AND ".join(clauses)

    async def _page(
        self,
        scope: Scope,
        filters: ListingFilters,
        limit: int,
        *,
        resume: Resumed | None,
        probe: bool,
    ) -> RunPage:
        """Up to ``limit`` of the tenant's Runs from ``token`` on, and the cursor past them.

        Each page is asked of Temporal for exactly the places still open, and read whole,
        so Temporal's next page token is exactly where this page ends (no Run of a page
        read halfway is skipped or shown twice). ``probe``: when the page is full and
        Temporal has a token, ask whether anything follows it, so the last page says so.
        """
        # A first page starts the listing: its cursors keep when (``continued_since``), by
        # Temporal's clock, not this client's (``_started``).
        if resume is None:
            self._query(scope, filters, None)  # refused before any request, as any listing
            at = Resumed(b"", await self._started(scope))
        else:
            at = resume
        query = self._query(scope, filters, at.since)
        found: list[RunSummary] = []
        wait = self._visibility.rpc_timeout
        # The filter named the tenant; a visibility store that compares it loosely (a
        # case-insensitive collation) must still show no other tenant's Run, and those it
        # answers must not take the caller's places: read on past them, up to a bound.
        foreign = 0
        # Workflows under the tenant's attribute whose ids name no psych Run (one started
        # by hand, another system's): not Runs, so not shown, and read past as the others.
        strays: list[str] = []
        resumed = resume is not None
        token = None if resume is None else resume.token
        while len(found) < limit and foreign + len(strays) < FOREIGN_MAX:
            size = min(limit - len(found), PAGE_MAX)
            if resumed:
                asked = self._visibility.resumed(query, size, token)
                resumed = False
            else:
                asked = self._visibility.page(query, size, token)
            page = await listing_read(scope.tenant, "a page", wait, asked)
            for info in page.executions:
                named = ids_from(info.execution.workflow_id)
                if named is None:
                    strays.append(info.execution.workflow_id)
                elif named[0] != scope.tenant:
                    foreign += 1
                else:
                    found.append(_summary(info, named[1]))
            token = page.token
            if token is None:
                break
        # Not the caller's to see, but the operator's to know; past FOREIGN_MAX of them
        # the page ends short, its cursor reading on past them (one that read to the end
        # of the listing did not: nothing is left to read).
        short = len(found) < limit and foreign + len(strays) >= FOREIGN_MAX and token is not None
        ended = f"{len(found)} of up to {limit}" if short else ""
        for warning in read_past(scope.tenant, foreign, strays, ended):
            logger.warning("%s", warning)
        if token is not None and probe:
            # A full page's token may lead nowhere (Temporal answers one whenever a page
            # is full): look one Run ahead, so the last page has no cursor.
            asked = self._visibility.page(query, 1, token)
            ahead = await listing_read(scope.tenant, "the look past a full page", wait, asked)
            if not ahead.executions and ahead.token is None:
                token = None
        if filters.suspended:
            # Concurrently, a few at a time: one at a time, a page of Runs whose worker is
            # slow would take LIST_QUERY_SECONDS each.
            queries = asyncio.Semaphore(LIST_QUERIES_AT_ONCE)

            async def with_pending(summary: RunSummary) -> RunSummary:
                async with queries:
                    return await self._with_pending(summary, scope)

            found = list(await asyncio.gather(*(with_pending(summary) for summary in found)))
        cursor = None if token is None else make_cursor(scope.tenant, filters, token, at.since)
        again = make_cursor(scope.tenant, filters, at.token, at.since)
        return RunPage(runs=tuple(found), next_cursor=cursor, cursor=again)

    async def _started(self, scope: Scope) -> datetime:
        """When a listing starts, as ``continued_since`` reads it, by Temporal's clock:
        just past the close of the tenant's execution that continued as new last (the
        epoch when none did). Every execution that continued as new before is left out,
        every one that does while the listing pages on is kept (Temporal closes it later),
        whatever this client's clock says: one ahead of the server's dropped those, one
        behind repeated the ones that went on before the listing."""
        query = f"{SA_TENANT} = {_quote(scope.tenant)} AND ExecutionStatus = 'ContinuedAsNew'"
        # Newest close first (visibility's order of closed executions); other tenants' a
        # loosely matching store answers are read past, as the listing does.
        foreign, size, token = 0, 1, None
        while foreign < FOREIGN_MAX:
            asked = self._visibility.page(query, size, token)
            page = await listing_read(scope.tenant, _FIRST, self._visibility.rpc_timeout, asked)
            for info in page.executions:
                # Another tenant's Run, or a workflow that is no psych Run (not listed
                # either, ``_page``): read past.
                named = ids_from(info.execution.workflow_id)
                ours = named is not None and named[0] == scope.tenant
                if ours and info.HasField("close_time"):
                    return ceil_micros(info.close_time)
                foreign += 1
            if page.token is None:
                return EPOCH
            size, token = max(1, min(FOREIGN_MAX - foreign, PAGE_MAX)), page.token
        # Past the bound: its executions that went on before may be listed again (never
        # one dropped).
        return EPOCH

    async def _with_pending(self, summary: RunSummary, scope: Scope) -> RunSummary:
        """The summary with what the Run waits for; one Run nobody can answer for (no
        worker polls its queue) must not hide the others, so it says why instead."""
        wait = timedelta(seconds=LIST_QUERY_SECONDS)
        try:
            state = await self._state(summary.workflow_id, scope, wait)
        except NotFound as err:
            return dataclasses.replace(summary, unreadable=str(err))
        except (TemporalUnanswered, TemporalCancelled) as err:
            # Temporal's own silence (a closed Run's describe), or its giving the read up
            # at once, not a worker's silence.
            return dataclasses.replace(summary, unreadable=err.why)
        except RPCError as err:
            if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                why = f"no worker answered within {LIST_QUERY_SECONDS:g} s"
            elif err.status == RPCStatusCode.FAILED_PRECONDITION:
                why = "no worker polls its task queue"
            else:
                why = "Temporal refused the query"
            return dataclasses.replace(summary, unreadable=f"{why} ({err.message})")
        return dataclasses.replace(summary, pending=state.pending)
