"""PsychClient: publish Specs and drive Runs through a Temporal client.

A Run is addressed by its workflow id, ``psych-<tenant>-<run id>``. Tenants cannot contain
``-``, so the tenant of a Run can be read off its id; every call checks it against the
caller's Scope (and the Run's own state where a query is made anyway) and refuses another
tenant's Run with AccessDenied.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryRejectedError,
)
from temporalio.common import (
    SearchAttributeKey,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.exceptions import CancelledError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from psych_runtime.activities.contract import ThreadRef
from psych_runtime.specs import (
    AccessDenied,
    AgentSpec,
    PsychError,
    RunFailed,
    Scope,
    SpecError,
    TenantPermits,
    ToolRegistry,
    ValidationContext,
    ValidationFailed,
    Version,
    VersionStore,
    WorkflowSpec,
    validate,
)
from psych_runtime.workflows.client._asked import (
    TEMPORAL_READ_TIMEOUT,
    describe_within,
    given_timeout,
    query_run,
)
from psych_runtime.workflows.client._call_inputs import TenantBlobs
from psych_runtime.workflows.client._chain import chain_page
from psych_runtime.workflows.client._checked import CheckedVersions, check_permitted
from psych_runtime.workflows.client._client_actions import RunActions
from psych_runtime.workflows.client._client_report import RunReporting
from psych_runtime.workflows.client._client_stream import RunStreaming
from psych_runtime.workflows.client._closed import awaited_result
from psych_runtime.workflows.client._follow_hub import FollowHub
from psych_runtime.workflows.client._listing import RunListing, parse_workflow_id
from psych_runtime.workflows.client._same_input import check_same_input
from psych_runtime.workflows.client._unsettled import REJECT_CLOSED, closed_state, failure_reason
from psych_runtime.workflows.client._visibility import Visibility
from psych_runtime.workflows.contract._contract import (
    QUERY_RECORDS,
    QUERY_STATE,
    SA_AGENT,
    SA_VERSION,
    AgentRunInput,
    RecordsPage,
    RecordsQuery,
    RunHandle,
    RunResult,
    RunState,
    WorkflowRunInput,
    run_search_attributes,
    workflow_id_for,
    workflow_type_for,
)

DEFAULT_TASK_QUEUE = "psych"
_AGENT = SearchAttributeKey.for_keyword(SA_AGENT)
_VERSION = SearchAttributeKey.for_keyword(SA_VERSION)


CANCELLED_STATE_TIMEOUT = timedelta(seconds=10)
"""How long ``result`` waits for a worker to answer what a cancelled Run settled with."""


class PsychClient(RunActions, RunStreaming, RunListing, RunReporting):
    """Publish Specs and drive Runs (see the module docstring).

    Args:
        client: a Temporal client whose data converter is pydantic's
            (``temporalio.contrib.pydantic.pydantic_data_converter``, which the psych
            Temporal plugin installs).
        store: where Versions are published.
        task_queue: the task queue psych workers poll.
        context: what ``publish`` validates against (registered tools, known models...).
        registry: the ToolRegistry the workers load, when this process has it; ``publish``
            then checks code tools against its names at the moment of publishing.
        search_attributes: start Runs with psych's search attributes (``SEARCH_ATTRIBUTES``,
            registered in the namespace) so ``list`` finds them; False for a server without
            them (the time-skipping test server): none upserted, ``list`` refuses.
        roles_apart: the fleet runs worker roles in separate processes (``psych worker
            --role ...``): each activity of its Runs goes to its role's task queue. False
            for workers of role ``all`` (the default): to the Run's own queue, eagerly.
        permits: what each tenant may use (``TenantPermits``); dispatch refuses a Spec using more.
        blobs: the workers' blob store (opened per tenant when sealed), a report's model
            call inputs read from it when asked (``report(..., inputs=...)``).
    """

    def __init__(
        self,
        client: Client,
        *,
        store: VersionStore,
        task_queue: str = DEFAULT_TASK_QUEUE,
        context: ValidationContext | None = None,
        registry: ToolRegistry | None = None,
        search_attributes: bool = True,
        roles_apart: bool = False,
        permits: TenantPermits | None = None,
        blobs: TenantBlobs | None = None,
    ) -> None:
        converter = client.data_converter.payload_converter_class
        if not issubclass(converter, PydanticPayloadConverter):
            raise SpecError(
                "the Temporal client must use the pydantic data converter: connect with "
                "plugins=[PsychPlugin()] or data_converter=pydantic_data_converter"
            )
        self.temporal = client
        self.store = store
        self.task_queue = task_queue
        self.context = context or ValidationContext()
        self.registry = registry
        self.search_attributes = search_attributes
        self.roles_apart = roles_apart
        self.permits = permits
        self.blobs = blobs
        self._visibility = Visibility(client)
        self.follows = FollowHub(client)
        """The shared followers of this client's streams (one per followed Run)."""
        self._checked = CheckedVersions()

    # --- versions ------------------------------------------------------------------------

    def publish(
        self,
        spec: AgentSpec | WorkflowSpec,
        context: ValidationContext | None = None,
        *,
        mcp_connections: Mapping[str, str | None] | None = None,
    ) -> Version:
        """Validate ``spec`` and publish it; an identical Spec returns the existing Version.

        Args:
            spec: the Spec.
            context: what to validate against (default: the client's ``context``).
            mcp_connections: the answer of a connection check,
                ``await psych_runtime.workers.check_connections(spec, scope=..., secrets=...)``
                (the client itself never connects to MCP servers); with it, a
                non-optional MCP server that did not answer is a problem, as with
                ``psych publish --check-connections``. It replaces the context's.

        Raises:
            ValidationFailed: with every problem found.
            StoreUnavailable: the version store did not answer (S3: its message names the
                Version by hash, the endpoint only in its ``detail``); a local store's disk
                refused: ``LocalStoreFailed``, one too (its ``lasting``: whether sending it
                again can help before the directory is mended).
        """
        context = context or self.context
        if self.registry is not None:
            context = dataclasses.replace(
                context, registered_tools=context.registered_tools | self.registry.names()
            )
        if mcp_connections is not None:
            context = dataclasses.replace(context, mcp_connections=mcp_connections)
        problems = validate(spec, context)
        if problems:
            raise ValidationFailed(problems)
        version = self.store.publish(spec)
        self._checked.passed(version.hash)
        return version

    def _version(self, spec: Version | AgentSpec | WorkflowSpec | str) -> Version:
        """The Version a dispatch runs: a Spec published; a Version (given, or got by its
        hash) whose hash is its Spec's and whose Spec passes every check that needs no
        worker (``context_free_problems``), once per hash."""
        if isinstance(spec, AgentSpec | WorkflowSpec):
            return self.publish(spec)
        # Built with Version.of, read from a document, or written to the store by someone
        # who did not validate: publishing would have refused it, so starting it must too.
        return self._checked.check(
            spec.verify() if isinstance(spec, Version) else self.store.get(spec)
        )

    # --- runs ----------------------------------------------------------------------------

    async def dispatch(
        self,
        spec: Version | AgentSpec | WorkflowSpec | str,
        input: str | Sequence[str],
        *,
        scope: Scope,
        idempotency_key: str | None = None,
        thread: RunHandle | str | None = None,
        continue_after_events: int | None = None,
    ) -> RunHandle:
        """Start a Run of ``spec`` (a Version, a Spec to publish, or a Version hash): an
        AgentRun for an agent, a WorkflowRun for a workflow.

        With a ``thread`` (an earlier agent Run of the same tenant, by handle or workflow id),
        the new Run continues its conversation: its model sees the earlier Run's last messages,
        as many as the new Spec's ``limits.max_history_records`` (0: none), read by reference
        from the conversation head the earlier Run has now.

        With an ``idempotency_key``, the same tenant and key always reach the same Run,
        whether it is still running or settled, as long as the input is the same (the same
        Version and messages): a key names one dispatch.

        ``continue_after_events`` (``RunInput.continue_after_events``; None keeps its default)
        is the history length at which the Run continues as new at its next turn boundary (a
        workflow: before its next step).

        A Version (or hash) this client did not publish is checked first, once per hash: one
        whose Spec fails a check of publishing that needs no worker (``context_free_problems``:
        all but code tools' registration, models and MCP reachability) is refused, as publishing
        it would have been.

        Raises:
            ValidationFailed: ``spec`` fails validation (a Spec), or the checks that need
                no worker (a Version or hash); with every problem and its path.
            PsychError: the key already started a Run with another Version or other
                messages (silently answering with that Run would drop this input); or
                the ``thread`` Run has no conversation (a workflow, or no model call yet).
            AccessDenied: the ``thread`` Run belongs to another tenant.
            NotPermitted: the Spec uses what the tenant is not permitted (``permits``),
                unless the ``idempotency_key`` started its Run already (that is the answer).
            NotFound: no such ``thread`` Run.
            SpecError: a ``thread`` for a workflow Version (only agents converse); labels
                past ``Scope.check_labels``'s bounds, or a principal holding a control
                character.
        """
        scope.check_labels()
        version = self._version(spec)
        if idempotency_key is not None:
            digest = hashlib.sha256(f"{scope.tenant}\0{idempotency_key}".encode()).hexdigest()
            run_id = f"k{digest[:31]}"
        else:
            run_id = uuid.uuid4().hex
        workflow_id = workflow_id_for(scope.tenant, run_id)
        keyed = None if idempotency_key is None else self.temporal.get_workflow_handle(workflow_id)
        start = await check_permitted(self.permits, version, scope, keyed)
        messages = (input,) if isinstance(input, str) else tuple(input)
        continued = None if thread is None else await self._thread(thread, version, scope)
        handle = RunHandle(workflow_id, run_id, scope.tenant, version.spec.name, version.hash)
        if start:  # else not permitted, but the key's Run exists, which is the answer
            # A settled Run with this id raises WorkflowAlreadyStartedError: the idempotent
            # answer is that Run, so the error is the expected outcome, not a failure.
            with contextlib.suppress(WorkflowAlreadyStartedError):
                input_type = AgentRunInput if version.spec.kind == "agent" else WorkflowRunInput
                await self.temporal.start_workflow(
                    workflow_type_for(version),
                    input_type(
                        run_id=run_id,
                        version=version,
                        scope=scope,
                        messages=messages,
                        thread=continued,
                        roles_apart=self.roles_apart,
                        **(
                            {"continue_after_events": continue_after_events}
                            if continue_after_events is not None
                            else {}
                        ),
                    ),
                    id=workflow_id,
                    task_queue=self.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    search_attributes=(
                        run_search_attributes(scope.tenant, version.spec.name, version.hash)
                        if self.search_attributes
                        else TypedSearchAttributes.empty
                    ),
                    static_summary=f"{version.spec.kind} {version.spec.name} ({version.hash[:19]})",
                )
        if idempotency_key is None:
            return handle
        await check_same_input(
            self.temporal,
            workflow_id,
            idempotency_key,
            version,
            messages,
            continued.run if continued else None,
        )
        if not self.search_attributes:
            return handle
        # The key may have reached an existing Run: answer with what that Run runs.
        keyed = self.temporal.get_workflow_handle(workflow_id)
        attributes = (
            await describe_within(keyed, workflow_id, TEMPORAL_READ_TIMEOUT)
        ).typed_search_attributes
        return dataclasses.replace(
            handle,
            agent=attributes.get(_AGENT) or handle.agent,
            version_hash=attributes.get(_VERSION) or handle.version_hash,
        )

    async def _thread(self, thread: RunHandle | str, version: Version, scope: Scope) -> ThreadRef:
        """The earlier Run's conversation head, read from its state (so its tenant is
        checked by the id and by the Run itself)."""
        if version.spec.kind != "agent":
            raise SpecError(
                f"a thread continues an agent's conversation; {version.spec.name!r} is a workflow"
            )
        workflow_id = thread.workflow_id if isinstance(thread, RunHandle) else thread
        state = await self._state(workflow_id, scope, None)
        if state.conversation_ref is None:
            raise PsychError(
                f"Run {workflow_id} has no conversation to continue "
                f"(a {state.kind} Run that has made no model call)"
            )
        return ThreadRef(run=workflow_id, head=state.conversation_ref)

    def _handle(
        self, run: RunHandle | str, scope: Scope, execution: str | None = None
    ) -> tuple[str, WorkflowHandle[Any, Any]]:
        workflow_id = run.workflow_id if isinstance(run, RunHandle) else run
        tenant, _ = parse_workflow_id(workflow_id)
        if tenant != scope.tenant:
            raise AccessDenied(f"Run {workflow_id} does not belong to tenant {scope.tenant!r}")
        return workflow_id, self.temporal.get_workflow_handle(workflow_id, run_id=execution)

    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        """The Run's current state.

        A Run whose workflow execution Temporal closed before it settled (an operator's
        terminate, an execution timeout) is answered ``failed``, as ``result()`` ends it and
        ``list`` shows it: its ``reason`` says how Temporal closed it and why (the
        terminate's reason), it waits on nothing (no ``pending``), and the rest is the state
        the execution was cut in. A live Run's status is one query, as before: the server
        refuses at once the query of an execution closed other than cleanly (``_unsettled.py``).

        Args:
            run: the Run.
            scope: who asks; its tenant must own the Run.
            query_timeout: how long to wait for a worker to answer the query; None waits as
                long as the client's default RPC timeout. With no worker polling the
                Run's task queue, the query waits for one that long.

        Raises:
            AccessDenied: the Run belongs to another tenant.
            NotFound: no such Run.
            RPCError: ``DEADLINE_EXCEEDED`` when no worker answered within ``query_timeout``
                (asked twice when the Run closed while the first waited: ``_asked.py``);
                ``ClosedStateUnanswered`` when its execution closed other than cleanly.
            ValueError: ``query_timeout`` is zero or negative (``given_timeout``).
        """
        return await self._state(run, scope, given_timeout(query_timeout, "query_timeout"))

    async def _state(
        self,
        run: RunHandle | str,
        scope: Scope,
        rpc_timeout: timedelta | None,
        *,
        as_shown: bool = True,
        execution: str | None = None,
    ) -> RunState:
        """The Run's state (its latest execution's, or ``execution``'s); ``as_shown``: one
        closed before it settled shows failed (``_unsettled.py``), else as it was cut."""
        workflow_id, handle = self._handle(run, scope, execution)
        state: RunState
        try:
            state = await query_run(
                handle,
                workflow_id,
                QUERY_STATE,
                None,
                RunState,
                rpc_timeout=rpc_timeout,
                reject_condition=REJECT_CLOSED if as_shown else None,
            )
        except WorkflowQueryRejectedError:  # closed failed, cancelled, terminated, timed out
            state = await closed_state(self.temporal, workflow_id, rpc_timeout)
        if state.tenant != scope.tenant:
            raise AccessDenied(f"Run {workflow_id} does not belong to tenant {scope.tenant!r}")
        return state

    async def records(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        limit: int = 500,
        query_timeout: timedelta | None = None,
    ) -> RecordsPage:
        """Records with ``seq > after`` (works while the Run is live); ``query_timeout`` bounds
        the wait for a worker to answer, as for ``status``. A Run that continued as new
        answers from whichever of its executions holds them (``_chain.py``), so ``seq``
        runs from 1 without a gap across the chain."""
        workflow_id, _ = self._handle(run, scope)
        given_timeout(query_timeout, "query_timeout")

        async def query_execution(run_id: str | None, query: RecordsQuery) -> RecordsPage:
            handle = self.temporal.get_workflow_handle(workflow_id, run_id=run_id)
            page: RecordsPage = await query_run(
                handle, workflow_id, QUERY_RECORDS, query, RecordsPage, rpc_timeout=query_timeout
            )
            return page

        return await chain_page(query_execution, RecordsQuery(after=after, limit=limit))

    async def result(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        query_timeout: timedelta | None = None,
        execution: str | None = None,
    ) -> RunResult:
        """Wait for the Run to settle and return its result.

        A Run whose workflow was cancelled (by an operator, or by its parent) settles
        ABORTED before the cancellation ends it: its result is then read from its state
        (one query, which a worker of its task queue answers within ``query_timeout``,
        ``CANCELLED_STATE_TIMEOUT`` when None), without ``handles``.

        ``execution`` (``RunSummary.execution``): that execution's result (or state, when
        cancelled), not followed past it; without, the latest execution's, followed to its
        end past each continue-as-new and each operator's reset (a reset while it waits, or
        of a settled Run: the new execution's, as it runs).

        Each long poll of its close event waits ``HISTORY_LONG_POLL_TIMEOUT`` at most
        (Temporal answers it empty sooner while the Run runs: it is asked again).

        Raises:
            RunFailed: the Run settled FAILED, or its workflow ended without settling
                (terminated, timed out), or was cancelled and no worker told what it
                settled with; ``reason`` says why.
            TemporalUnanswered: Temporal did not answer a long poll of the close event
                in time.
            TemporalCancelled: it gave one up at once (a CANCELLED under load).
            WorkflowContinuedAsNewError: ``execution`` continued as new: it has no result
                of its own (``new_execution_run_id`` names the next).
        """
        workflow_id, _ = self._handle(run, scope)
        given_timeout(query_timeout, "query_timeout")
        try:
            result = await awaited_result(self.temporal, workflow_id, execution)
        except WorkflowFailureError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                try:
                    state = await self._state(
                        workflow_id,
                        scope,
                        CANCELLED_STATE_TIMEOUT if query_timeout is None else query_timeout,
                        as_shown=False,
                        execution=execution,
                    )
                except (PsychError, RPCError) as unread:
                    raise RunFailed(
                        f"the Run's workflow was cancelled; what it settled with could not be "
                        f"read: {unread}"
                    ) from err
                if state.status.terminal:
                    return RunResult(
                        run_id=state.run_id,
                        status=state.status,
                        reason=state.reason or "",
                        answer=state.answer,
                        totals=state.totals,
                        outputs=state.outputs,
                    )
            raise RunFailed(failure_reason(err)) from err
        return result
