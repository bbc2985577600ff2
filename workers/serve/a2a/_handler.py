"""``PsychRequestHandler``: every A2A operation as PsychClient calls in the caller's Scope.

The Run is the task: nothing of a task is kept here (no task store), so a task outlives
this process exactly as its Run does, and every read asks the Run. The caller (its Scope,
and until when its credential is accepted) and the agent come from the call context
(``_routes.py`` puts them there after authenticating); the ``tenant`` an A2A request may
carry is never read. A stream ends when the caller's credential expires
(``until_caller_expires``), and the caller subscribes again with a fresh one; a blocking
SendMessage then answers with the task as it is (``wait_while_caller_may``). Whatever an
operation raises reaches the SDK as an A2A error, as REST answers it (``_errors.py``): a
server's outage an ``InternalError``, the caller's mistake ``InvalidParamsError``, each
carrying REST's problem type and status.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from datetime import timedelta
from typing import Any, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from temporalio.service import RPCError

from psych_runtime.specs import AccessDenied, NotFound, PsychError, Refused, Scope
from psych_runtime.workers._bounded import NotTakenInTime, bounded
from psych_runtime.workers.serve.a2a._calls import (
    caller_of,
    until_caller_expires,
    wait_while_caller_may,
)
from psych_runtime.workers.serve.a2a._cards import AgentCatalogue
from psych_runtime.workers.serve.a2a._child_polls import children_before
from psych_runtime.workers.serve.a2a._errors import (
    a2a_error,
    answering,
    cancel_error,
    internal_error,
    streaming,
)
from psych_runtime.workers.serve.a2a._list_tasks import (
    LIST_SCAN,
    TaskLister,
    page_size,
    wanted_state,
)
from psych_runtime.workers.serve.a2a._now import task_now
from psych_runtime.workers.serve.a2a._push import PushRegistry
from psych_runtime.workers.serve.a2a._replies import (
    Said,
    answer_text,
    decision,
    read_message,
    require_fields,
    task_input,
)
from psych_runtime.workers.serve.a2a._tasks import (
    asks,
    ends_task,
    stops,
    task_events,
    task_of,
    workflow_id_of,
)
from psych_runtime.workflows import ClosedRun, PsychClient, RunState, SuspensionReason

T = TypeVar("T")
R = TypeVar("R", RunState, ClosedRun | None)


class PsychRequestHandler(RequestHandler):
    """The A2A server of the published agents (see the module docstring).

    Args:
        client: what every operation goes through.
        catalogue: the published agents.
        pushes: the webhooks of tasks.
        query_timeout: how long a read waits for the Run's worker.
        cancel_wait_seconds: how long CancelTask waits for the Run to settle before it
            answers with the task as it is.
        list_scan: the most Runs one ListTasks looks at when its status filter is
            applied after reading (``_list_tasks.LIST_SCAN``).
    """

    def __init__(
        self,
        client: PsychClient,
        catalogue: AgentCatalogue,
        pushes: PushRegistry,
        *,
        query_timeout: timedelta,
        cancel_wait_seconds: float = 30.0,
        list_scan: int = LIST_SCAN,
    ) -> None:
        self.client = client
        self.lister = TaskLister(client, list_scan, query_timeout)
        self.catalogue = catalogue
        self.pushes = pushes
        pushes.resumed = self._taken_over
        self.query_timeout = query_timeout
        self.cancel_wait_seconds = cancel_wait_seconds

    # --- sending -------------------------------------------------------------------------

    @answering
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        scope, agent = caller_of(context)
        require_fields(params)
        workflow_id, state = await self._send(params, scope, agent)
        if params.configuration.return_immediately or stops(state):
            return task_of(state)
        events = self._events(workflow_id, scope, state.last_seq, through_input=False, of=state)
        await wait_while_caller_may(events, context)
        return task_of(await self._state(workflow_id, scope, agent))

    @streaming
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        scope, agent = caller_of(context)
        require_fields(params)
        workflow_id, state = await self._send(params, scope, agent)
        yield task_of(state)
        if stops(state):
            return
        events = self._events(
            workflow_id, scope, state.last_seq, through_input=False, deltas=True, of=state
        )
        async with contextlib.aclosing(until_caller_expires(events, context)) as bounded:
            async for event in bounded:
                yield event

    async def _send(
        self, params: SendMessageRequest, scope: Scope, agent: str
    ) -> tuple[str, RunState]:
        """Start the task, or answer what it asks; the Run's state after that."""
        message = params.message
        said = read_message(message)
        config = params.configuration
        pushing = config.HasField("task_push_notification_config")
        if pushing:  # refused before anything starts
            await self.pushes.check(scope, config.task_push_notification_config.url)
        after = 0
        if message.task_id:
            workflow_id = workflow_id_of(message.task_id, scope)
            state = await self._state(workflow_id, scope, agent)
            await self._reply(workflow_id, state, said, scope, message.message_id)
            after = state.last_seq
        else:
            version = await self.catalogue.latest(agent)
            if version is None:
                raise InvalidParamsError(f"no published agent {agent!r}")
            if not message.message_id:
                raise InvalidParamsError("the message has no messageId")
            # Answered as REST answers it (``a2a_error``): a tool not permitted, a store down.
            handle = await self.client.dispatch(
                version,
                task_input(said),
                scope=scope,
                # One message starts one task: a repeated send reaches the same Run.
                idempotency_key=f"a2a/{agent}/{message.message_id}",
            )
            workflow_id = handle.workflow_id
        if pushing:
            await self._register_push(
                scope, workflow_id, config.task_push_notification_config, after
            )
        return workflow_id, await self._state(workflow_id, scope, agent)

    async def _reply(
        self, workflow_id: str, state: RunState, said: Said, scope: Scope, message_id: str
    ) -> None:
        """Answer what the task asks with ``said``. The message's ``messageId`` keys the
        answer: sent again (after an error, a lost answer), the message is found taken and
        answered as it was, never taken as the answer to what the task asks next."""
        # A digest: a messageId of any length makes a key of 68 characters.
        key = f"a2a/{hashlib.sha256(message_id.encode()).hexdigest()}" if message_id else None
        if key is not None and await self._taken(workflow_id, key, scope):
            return
        if state.status.terminal:
            raise InvalidParamsError(
                f"task {state.run_id} has ended ({state.status}): a task that "
                "ended takes no more messages (send one without a taskId for a new task)"
            )
        waiting = [p for p in state.pending if asks(p)]
        if not waiting:
            raise InvalidParamsError(f"task {state.run_id} is not waiting for input")
        pending = waiting[0]
        # A child's item (``pending.run``) is answered through the Run, which forwards it.
        # The client's bound as long as ``_bounded``'s.
        keyed: dict[str, Any] = {
            "idempotency_key": key,
            "held_by": pending.run,
            "update_timeout": self.query_timeout,
        }
        if pending.reason is SuspensionReason.QUESTION:
            text = answer_text(said)
            await self._bounded(
                self.client.answer(workflow_id, pending.id, text, scope=scope, **keyed)
            )
        else:
            verdict = decision(said)
            act = self.client.approve if verdict.approve else self.client.deny
            await self._bounded(
                act(workflow_id, pending.id, scope=scope, note=verdict.note, **keyed)
            )

    async def _taken(self, workflow_id: str, key: str, scope: Scope) -> bool:
        """Whether the Run took a message under ``key`` already (its answer stands; taken,
        then refused, it raises what the Run said of it, answered by ``a2a_error``)."""
        taken = self.client.taken(workflow_id, key, scope=scope, update_timeout=self.query_timeout)
        return await self._bounded(taken) is not None

    async def _bounded(self, call: Awaitable[T]) -> T:
        """``call`` (an update of the Run), waiting for its worker as long as a read does.

        Raises:
            InternalError: no worker took it in time (it may still be applied; its data:
                REST's ``no-worker`` problem).
        """
        try:
            return await bounded(call, self.query_timeout.total_seconds())
        except NotTakenInTime as err:
            raise a2a_error(err) from err

    # --- reading -------------------------------------------------------------------------

    @answering
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        scope, agent = caller_of(context)
        require_fields(params)
        return task_of(await self._owned(params.id, scope, agent))

    @answering
    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        scope, agent = caller_of(context)
        require_fields(params)
        size = page_size(params)
        wanted = wanted_state(params.status)
        artifacts = params.include_artifacts
        if not params.context_id:
            return await self.lister.answer(
                scope, agent, wanted, size, params.page_token, artifacts=artifacts
            )
        # The context id is the task id: that one task (its state as GetTask reads it).
        if params.page_token:
            raise InvalidParamsError(
                "pageToken: a ListTasks by contextId answers its one task on one page; "
                "no token continues it"
            )
        tasks: list[Task] = []
        try:
            read = task_of(await self._owned(params.context_id, scope, agent))
        except TaskNotFoundError:
            pass  # another tenant's, another agent's, or none: no task of this context
        else:
            task_id, status = params.context_id, read.status
            shown = Task(id=task_id, context_id=task_id, status=status)
            if artifacts:
                shown.artifacts.extend(read.artifacts)
            tasks = [shown] if wanted in (None, status.state) else []
        return ListTasksResponse(
            tasks=tasks, next_page_token="", page_size=size, total_size=len(tasks)
        )

    @streaming
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        scope, agent = caller_of(context)
        require_fields(params)
        state = await self._owned(params.id, scope, agent)
        if isinstance(state, ClosedRun) or state.status.terminal:
            raise UnsupportedOperationError(f"task {params.id} has ended: read it with GetTask")
        yield (told := task_of(state))
        workflow_id = workflow_id_of(params.id, scope)
        events = self._events(
            workflow_id, scope, state.last_seq, through_input=True, deltas=True, told=told, of=state
        )
        async with contextlib.aclosing(until_caller_expires(events, context)) as bounded:
            async for event in bounded:
                yield event

    # --- cancelling ----------------------------------------------------------------------

    @answering
    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        scope, agent = caller_of(context)
        require_fields(params)
        state = await self._owned(params.id, scope, agent)
        if isinstance(state, ClosedRun) or state.status.terminal:
            raise TaskNotCancelableError(f"task {params.id} has already ended")
        workflow_id = workflow_id_of(params.id, scope)
        reason = f"canceled over A2A by {scope.principal or 'the caller'}"
        try:
            abort = self.client.abort(
                workflow_id, scope=scope, reason=reason, update_timeout=self.query_timeout
            )
            await self._bounded(abort)
        except Refused as err:  # it settled after it was read: TaskNotCancelableError
            raise cancel_error(err) from err
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.cancel_wait_seconds):
                following = self._events(
                    workflow_id, scope, state.last_seq, through_input=True, of=state
                )
                async for _ in following:
                    pass
        return task_of(await self._state(workflow_id, scope, agent))

    # --- push notifications --------------------------------------------------------------

    @answering
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        scope, agent = caller_of(context)
        require_fields(params)
        state = await self._owned(params.task_id, scope, agent)
        if isinstance(state, ClosedRun) or state.status.terminal:
            raise UnsupportedOperationError(f"task {params.task_id} has ended: nothing to push")
        workflow_id = workflow_id_of(params.task_id, scope)
        return await self._register_push(scope, workflow_id, params, state.last_seq)

    async def _register_push(
        self, scope: Scope, workflow_id: str, config: TaskPushNotificationConfig, after: int
    ) -> TaskPushNotificationConfig:
        def events() -> AsyncIterator[Event]:
            return self._pushed(workflow_id, scope, after)

        return await self.pushes.register(scope, workflow_id, config, events=events)

    async def _pushed(
        self, workflow_id: str, scope: Scope, after: int | None
    ) -> AsyncIterator[Event]:
        """The task's events for its webhooks, after record ``after``, until it ended
        (``after`` None: from its status now, as for a task taken over).

        Its records may stop short of its end while its workflow runs on (an operator reset
        the Run: one execution closed, the workflow goes on in a new one): then it is
        followed on from its status there, as a task taken over is.
        """
        while True:
            if after is not None:
                ended = False
                following = self._events(workflow_id, scope, after, through_input=True)
                async with contextlib.aclosing(following) as followed:
                    async for event in followed:
                        ended = ends_task(event)
                        yield event
                if ended:
                    return
            # Short of an end only when the workflow runs on: followed from its status now.
            now = await task_now(self.client, workflow_id, scope, self.query_timeout)
            if now is None:
                return
            events, after = now
            for event in events:
                yield event
            if ends_task(events[-1]):
                return

    def _taken_over(self, scope: Scope, workflow_id: str) -> AsyncIterator[Event]:
        """A task whose watcher this process takes over: its status as it is now (what
        happened while nobody watched), then what follows, until it ends (a Run no longer
        found, its history past the namespace's retention, has ended: nothing is pushed)."""
        return self._pushed(workflow_id, scope, None)

    @answering
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        scope, agent = caller_of(context)
        require_fields(params)
        await self._owned(params.task_id, scope, agent)
        return await self.pushes.get(scope, workflow_id_of(params.task_id, scope), params.id)

    @answering
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        scope, agent = caller_of(context)
        require_fields(params)
        await self._owned(params.task_id, scope, agent)
        configs = await self.pushes.list(scope, workflow_id_of(params.task_id, scope))
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    @answering
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        scope, agent = caller_of(context)
        require_fields(params)
        await self._owned(params.task_id, scope, agent)
        await self.pushes.delete(scope, workflow_id_of(params.task_id, scope), params.id)

    @answering
    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError("the public card is the whole card")

    # --- the Run -------------------------------------------------------------------------

    async def _owned(self, task_id: str, scope: Scope, agent: str) -> RunState | ClosedRun:
        """The caller's task ``task_id`` of this agent as it shows: its state, or, once its
        execution closed, what Temporal holds of it (``PsychClient.closed``: no worker).

        Raises:
            TaskNotFoundError: no such task in the caller's tenant, or another agent's.
        """
        workflow_id = workflow_id_of(task_id, scope)
        read = self.client.closed(workflow_id, scope=scope, rpc_timeout=self.query_timeout)
        closed = await self._read(workflow_id, read, agent)
        return await self._state(workflow_id, scope, agent) if closed is None else closed

    async def _state(self, workflow_id: str, scope: Scope, agent: str) -> RunState:
        read = self.client.status(workflow_id, scope=scope, query_timeout=self.query_timeout)
        return await self._read(workflow_id, read, agent)

    async def _read(self, workflow_id: str, read: Awaitable[R], agent: str) -> R:
        """What ``read`` answers of the Run, when it is a task of this agent."""
        try:
            state = await read
        except (NotFound, AccessDenied) as err:
            raise TaskNotFoundError(f"no task {workflow_id.rpartition('-')[2]!r}") from err
        except RPCError as err:
            raise a2a_error(err, "the Run could not be read") from err
        if state is not None and (state.agent != agent or state.kind != "agent"):
            raise TaskNotFoundError(f"no task {state.run_id!r}")
        return state

    async def _events(
        self,
        workflow_id: str,
        scope: Scope,
        after: int,
        *,
        through_input: bool,
        deltas: bool = False,
        told: Task | None = None,
        of: RunState | None = None,
    ) -> AsyncGenerator[Event]:
        """The task's events after ``after`` (``task_events``); ``of``: the Run's state
        there, which may say no child of it can be running yet (None: not read)."""
        following = task_events(
            self.client,
            workflow_id,
            scope=scope,
            after=after,
            deltas=deltas,
            through_input=through_input,
            grace=self.query_timeout,
            told=told,
            earlier=of is None or children_before(of),
        )
        # Each generator down to the close watch (``_closing.py``) closes with the one above.
        try:
            async with contextlib.aclosing(following) as events:
                async for event in events:
                    yield event
        except A2AError:
            raise
        except (PsychError, RPCError) as err:
            raise internal_error(err, "following the Run failed") from err
