"""PsychClient's ``report``: a Run's records projected (``_report.py``), with the inputs
of its model calls read from the blob store when asked (``_call_inputs.py``); and
``closed``: how a Run that ended shows, read with no worker (``_closed.py``)."""

from __future__ import annotations

import abc
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle

from psych_runtime.specs import AccessDenied, Scope
from psych_runtime.workflows.client._asked import given_timeout
from psych_runtime.workflows.client._call_inputs import Inputs, TenantBlobs, with_inputs
from psych_runtime.workflows.client._closed import ClosedRun, closed_run
from psych_runtime.workflows.client._report import build_report
from psych_runtime.workflows.client._report_types import RunReport
from psych_runtime.workflows.contract._contract import RecordsPage, RunHandle, RunState
from psych_runtime.workflows.contract._records import Record, StepStarted


class RunReporting(abc.ABC):
    """Reporting on a Run (PsychClient has it)."""

    blobs: TenantBlobs | None
    temporal: Client

    @abc.abstractmethod
    def _handle(self, run: RunHandle | str, scope: Scope) -> tuple[str, WorkflowHandle[Any, Any]]:
        """The Run's workflow id and handle, after checking the caller's tenant owns it."""

    @abc.abstractmethod
    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        """The Run's current state."""

    @abc.abstractmethod
    async def records(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        limit: int = 500,
        query_timeout: timedelta | None = None,
    ) -> RecordsPage:
        """Records with ``seq > after``."""

    async def report(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        query_timeout: timedelta | None = None,
        inputs: Inputs = False,
        max_inputs: int | None = None,
    ) -> RunReport:
        """The Run's report: a typed projection of all its records.

        Each answered model call names what it was sent by reference (``context_ref``,
        ``system_ref``, ``context_blocks``); ``inputs`` reads it from the client's blob
        store into the call's ``system_prompt`` and ``messages``: every call's (True), or
        the calls of the given turns (the default, False, reads nothing: a Run of 200
        turns would read 200 conversations).

        ``query_timeout`` bounds each query's wait for a worker to answer, as for ``status``;
        ``max_inputs`` bounds how many calls' inputs are read (a server answering many).

        Raises:
            BlobsUnavailable: ``inputs`` asked, and the client has no blob store (``blobs``)
                or its store does not hold what a call names.
            BlobUnreadable: a blob a call names is in the store but does not open
                (damaged, or sealed under other keys than the client's).
            Refused: ``TooLarge``, ``inputs`` selects more than ``max_inputs`` calls.
        """
        workflow_id, _ = self._handle(run, scope)
        state = await self.status(workflow_id, scope=scope, query_timeout=query_timeout)
        records: list[Record] = []
        while True:
            page = await self.records(
                workflow_id,
                scope=scope,
                after=len(records),
                limit=5000,
                query_timeout=query_timeout,
            )
            records.extend(page.records)
            if not page.records or len(records) >= page.last_seq:
                break
        children = {
            record.run: await self.report(record.run, scope=scope, query_timeout=query_timeout)
            for record in records
            if isinstance(record, StepStarted) and record.run is not None
        }
        report = build_report(workflow_id, state, records, children)
        return await with_inputs(report, self.blobs, inputs, scope.tenant, max_inputs)

    async def closed(
        self, run: RunHandle | str, *, scope: Scope, rpc_timeout: timedelta | None = None
    ) -> ClosedRun | None:
        """The Run as its closed latest execution shows it, read from Temporal with no
        worker (its description and close event: ``_closed.py``), as ``status`` shows it;
        None when the execution is open, or its close event (and, cancelled, its history)
        does not carry what its state shows (one closed after the Run settled, say): ask
        ``status``, which a worker answers.

        Raises:
            AccessDenied: the Run belongs to another tenant.
            NotFound: no such Run.
            TemporalUnanswered: Temporal did not answer a read within ``rpc_timeout``
                (``HistoryNotRead``: a page of a cancelled Run's history).
            RPCError: Temporal could not describe it or read its close event.
            ValueError: ``rpc_timeout`` is zero or negative (``given_timeout``).
        """
        workflow_id, _ = self._handle(run, scope)
        rpc_timeout = given_timeout(rpc_timeout, "rpc_timeout")
        shown = await closed_run(self.temporal, workflow_id, rpc_timeout)
        if shown is not None and shown.tenant != scope.tenant:
            raise AccessDenied(f"Run {workflow_id} does not belong to tenant {scope.tenant!r}")
        return shown
