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

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.contract import ids_from
from psych_runtime.specs import NotFound, Scope, SpecError
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


class RunListing(abc.ABC):
    """``list`` (PsychClient has it)."""

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
        """The tenant's Runs, newest first, filtered by search attributes.

        ``suspended=True`` lists only suspended Runs, each with what it waits for, on whom,
        and until when (one state query per Run).

        Raises:
            SpecError: this client starts Runs without search attributes.
        """
        if not self.search_attributes:
            raise SpecError("listing needs search attributes: this client starts Runs without")
        clauses = [f"{SA_TENANT} = {_quote(scope.tenant)}"]
        if agent is not None:
            clauses.append(f"{SA_AGENT} = {_quote(agent)}")
        if version_hash is not None:
            clauses.append(f"{SA_VERSION} = {_quote(version_hash)}")
        if suspended:
            status = RunStatus.SUSPENDED
        if status is not None:
            clauses.append(f"{SA_STATUS} = {_quote(str(status))}")
        found: list[RunSummary] = []
        # The filter named the tenant; a visibility store that compares it loosely (a
        # case-insensitive collation) must still show no other tenant's Run, and those it
        # answers must not take the caller's places: read on past them, up to a bound.
        query = " AND ".join(clauses)
        foreign = 0
        async for execution in self.temporal.list_workflows(query, limit=limit + FOREIGN_MAX):
            if len(found) == limit:
                break
            attributes = execution.typed_search_attributes
            tenant, run_id = parse_workflow_id(execution.id)
            if tenant != scope.tenant:
                foreign += 1
                continue
            found.append(
                RunSummary(
                    workflow_id=execution.id,
                    run_id=run_id,
                    agent=attributes.get(_AGENT),
                    version_hash=attributes.get(_VERSION),
                    status=attributes.get(_STATUS),
                    started_at=execution.start_time,
                    closed_at=execution.close_time,
                    suspension=attributes.get(_SUSPENSION),
                )
            )
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
        if suspended:
            # Concurrently, a few at a time: one at a time, a page of Runs whose worker is
            # slow would take LIST_QUERY_SECONDS each.
            queries = asyncio.Semaphore(LIST_QUERIES_AT_ONCE)

            async def with_pending(summary: RunSummary) -> RunSummary:
                async with queries:
                    return await self._with_pending(summary, scope)

            found = list(await asyncio.gather(*(with_pending(summary) for summary in found)))
        return found

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
