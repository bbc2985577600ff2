"""A2A activities: a turn's catalogue of peer skills (``psych.a2a.cards``) and one message
to a peer (``psych.tool.a2a``), over the official ``a2a-sdk`` client transports.

A peer's card is fetched through the worker's egress port for the Run's tenant and cached
per (tenant, principal, url, credential identity) for ``A2aSettings.card_ttl_seconds``;
its skills are narrowed by ``allow`` through the one ``narrow`` and named
``<peer>__<skill>`` like MCP tools. An unreachable peer is data (``status="unavailable"``):
the workflow decides whether that fails the Run. A message is sent once, with a message id
made of the Run and the call (so a peer that deduplicates by message id never acts twice),
and its answer, artifacts and an ``input-required`` question come back as the tool result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Literal, TypeVar

from a2a.client import ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.client.transports.base import ClientTransport
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError
from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities._beat import heartbeating
from psych_runtime.activities.a2a._answer import (
    INTERRUPTED,
    TERMINAL,
    Answer,
    answer_of_message,
    answer_of_task,
    question_text,
    state_name,
    with_handles,
)
from psych_runtime.activities.a2a._cancel import Cancelling
from psych_runtime.activities.a2a._cards import Cards
from psych_runtime.activities.a2a._peers import (
    Connection,
    Peers,
    PeerUnavailable,
    connect,
    describe,
)
from psych_runtime.activities.a2a._push import PeerPush, keep_push, new_secret
from psych_runtime.activities.a2a._settings import A2aSettings
from psych_runtime.activities.blobs import BlobStore
from psych_runtime.activities.contract import (
    A2A_MESSAGE_ARGUMENT,
    A2A_POLL,
    A2A_QUESTION_TOKEN,
    A2A_TASK_ARGUMENT,
    TOOL_A2A,
    A2aPollInput,
    A2aToolCall,
    ToolOutcome,
)
from psych_runtime.activities.egress import Egress, never_sent
from psych_runtime.activities.hooks import HookCall, Hooks, Interception
from psych_runtime.activities.secrets import Redactor, SecretResolver
from psych_runtime.activities.telemetry import tool_span, traced_tool
from psych_runtime.activities.tokens import TokenStore
from psych_runtime.activities.tools import (
    Policy,
    RulePolicy,
    complete_through_client,
    store_outcome,
    unexpected,
)
from psych_runtime.specs import TenantPermits, narrow

_T = TypeVar("_T")


class A2aActivities(Cards, Cancelling, ActivityClass):
    """The A2A activities, sharing one card cache and transport pool per worker."""

    def __init__(
        self,
        *,
        blobs: BlobStore,
        egress: Egress,
        secrets: SecretResolver | None = None,
        policy: Policy | None = None,
        hooks: Hooks | None = None,
        settings: A2aSettings | None = None,
        outage_seconds: float = 0.0,
        tokens: TokenStore | None = None,
        permits: TenantPermits | None = None,
    ) -> None:
        """Create the activities.

        Args:
            blobs: where definitions, results and large artifacts are stored.
            egress: the worker's egress port: every card fetch and message goes through
                its client for the Run's tenant.
            secrets: resolves peers' credentials per Scope; without one, a peer that names
                a credential is unavailable.
            policy: decides allow/deny/ask per skill (fixed per tool when it can).
            hooks: the pre, post and on_error hooks every peer call runs through, matched
                on the model-facing ``peer__skill`` name.
            settings: timeouts, cache and pool bounds (``A2aSettings()``).
            outage_seconds: as for ``ToolActivities``: a peer call reports its outcome
                through the worker's client and gets a heartbeat timeout of this plus
                ``OUTAGE_MARGIN`` (0: no such care).
            tokens: the fleet's TokenStore, where a call that asks a peer for push
                notifications (``settings.push_url``) keeps the push's id and secret for
                ``psych serve``'s push route; without one, peers are polled only.
            permits: what each tenant may use (``TenantPermits``): a peer's skills are
                narrowed by it before ``allow``, and a call outside it is refused (default
                none: no restriction).
        """
        self.blobs = blobs
        self.secrets = secrets
        self.policy: Policy = policy if policy is not None else RulePolicy()
        self.hooks = hooks if hooks is not None else Hooks()
        self.settings = settings if settings is not None else A2aSettings()
        self.tokens = tokens
        self.permits = permits
        self._outage_seconds = outage_seconds
        self.peers = Peers(
            egress,
            card_ttl_seconds=self.settings.card_ttl_seconds,
            max_entries=self.settings.max_entries,
        )

    # --- one message -----------------------------------------------------------------------

    @activity.defn(name=TOOL_A2A)
    async def call(self, input: A2aToolCall) -> ToolOutcome:
        """One message to the peer for a skill; its answer is the outcome (failures are
        data: an error outcome naming the peer and why).

        Raises:
            asyncio.CancelledError: the activity was cancelled.
            CompleteAsyncError: the outcome is reported through the worker's client.
        """
        started = time.monotonic()
        span = tool_span(
            tool=input.name,
            call_id=input.call_id,
            run_id=input.run_id,
            tenant=input.scope.tenant,
            arguments=input.arguments,
            tool_type="extension",
            extra={"psych.a2a.peer": input.peer.name, "psych.a2a.skill": input.skill},
        )
        plan = self.hooks.plan(
            HookCall.of(
                input.name, "a2a", input.arguments, input.call_id, input.run_id, input.scope
            )
        )
        outcome = await traced_tool(span, self._intercepted(input, started, plan))
        if not input.report_through_client or self._outage_seconds <= 0:
            return outcome
        complete_through_client(outcome, outcome.call_id)

    async def _denied(self, input: A2aToolCall, plan: Interception) -> str | None:
        """Why the message is not sent: the skill outside ``allow`` or the tenant's permits
        (the security check before any hook: no on_error hook may turn it into a result),
        or a pre hook's denial (None: it is sent)."""
        peer = input.peer
        permitted = await self.permitted(input.scope.tenant, peer)
        if peer.allow and not narrow([input.skill], allow=peer.allow):
            return f"skill {input.skill!r} of peer {peer.name!r} is not granted"
        if not narrow([input.skill], permitted=permitted):
            return (
                f"skill {input.skill!r} of peer {peer.name!r} is not permitted to tenant "
                f"{input.scope.tenant!r}"
            )
        return await plan.before()

    async def _intercepted(
        self, input: A2aToolCall, started: float, plan: Interception
    ) -> ToolOutcome:
        # Under a beat: a permits port slower than the heartbeat timeout would fail the
        # call as lost before it was sent (hooks beat on their own).
        denied = await heartbeating(self._denied(input, plan), self.settings.heartbeat_seconds)
        if denied is not None:
            return plan.stamp(await self._store(input, "denied", denied, started))
        if plan.rewritten:
            input = input.model_copy(update={"arguments": plan.arguments})
        connection: Connection | None = None
        sending = False  # the message's request built: from here it may reach the peer
        try:
            connection = await connect(input.peer, input.scope, self.secrets)
            built = await self._request(input, connection)
            sending = not isinstance(built, Answer)
            answer = built if isinstance(built, Answer) else await self._send(input, *built)
        except PeerUnavailable as err:  # before the message was sent (its card, say)
            said = f"A2A peer {input.peer.name!r} is unavailable: {err}"
            answer = Answer("error", said, sent=False)
        except Exception as err:  # a SecretResolver's own failure, a bug: sent if sending
            redact = connection.redact if connection is not None else Redactor()
            answer = Answer("error", unexpected(input.name, err, redact), sent=sending)
        unsent = isinstance(answer, Answer) and not answer.sent
        once = input.report_through_client and sending and not unsent
        redact = connection.redact if connection is not None else Redactor()
        if isinstance(answer, Task) and answer.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            # The Run's person answers (``questions_to_person``): the question is no answer
            # yet, so no post hook runs on it; they run on the answer to the reply.
            return plan.stamp(await self._question(input, answer, redact, started, once))
        if isinstance(answer, Task):
            # Still working past the hold: the Run waits durably and polls (post hooks run
            # on the answer, in ``psych.a2a.poll``).
            text = (
                f"Waiting for A2A peer {input.peer.name!r}: task {answer.id} is "
                f"{state_name(answer.status.state)}."
            )
            waiting = await self._store(input, "wait", text, started, once)
            return plan.stamp(waiting.model_copy(update={"wait_token": answer.id}))
        final, shown = await plan.after(answer.status, redact(answer.text))
        stored = await self._store(input, final, shown, started, once, unsent)
        return plan.stamp(with_handles(stored, answer))

    @activity.defn(name=A2A_POLL)
    async def poll(self, input: A2aPollInput) -> ToolOutcome:
        """Read a task the peer left working: a ``wait`` outcome while it still is, else
        the call's answer after the post or on_error hooks (a failure reading it is retried
        by Temporal: a read is safe to repeat)."""
        started = time.monotonic()
        # The call's hooks, with the arguments the peer was sent (as a pre hook rewrote them).
        plan = self.hooks.plan(
            HookCall.of(
                input.name, "a2a", input.arguments, input.call_id, input.run_id, input.scope
            )
        )
        connection = await connect(input.peer, input.scope, self.secrets)
        fetched, _ = await self.peers.card(
            input.peer, input.scope, connection, fetch_seconds=self.settings.card_timeout_seconds
        )
        transport = self.peers.transport(input.scope, connection, fetched.card)
        deadline = time.monotonic() + self.settings.call_timeout_seconds
        try:
            task = await self._beating(
                transport.get_task(
                    GetTaskRequest(id=input.task_id, tenant=input.peer.tenant or ""),
                    context=connection.context(self.settings.call_timeout_seconds),
                ),
                deadline,
            )
        except A2AClientError:
            raise  # the peer was not reached, or did not answer: read again
        except A2AError as err:  # the peer answered with an error (no such task): the end
            text = (
                f"A2A peer {input.peer.name!r} could not give task {input.task_id}: {describe(err)}"
            )
            # A failure the model reads, as a failed task's: the on_error hooks' to replace.
            final, shown = await plan.after("error", connection.redact(text))
            return plan.stamp(await self._store(input, final, shown, started))
        if task.status.state not in TERMINAL | INTERRUPTED:
            text = f"task {task.id} is {state_name(task.status.state)}"
            return await self._store(input, "wait", text, started)
        if input.questions_to_person and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return await self._question(input, task, connection.redact, started)
        if task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED:
            context = connection.context(self.settings.call_timeout_seconds)
            await self._give_up(transport, task, input, context, connection.redact)
        answer = await self._answer(task, input)
        final, shown = await plan.after(answer.status, connection.redact(answer.text))
        return plan.stamp(with_handles(await self._store(input, final, shown, started), answer))

    async def _push_config(
        self, input: A2aToolCall, card: AgentCard
    ) -> TaskPushNotificationConfig | None:
        """Where the peer is asked to push the task's updates (None: it is not asked: no
        ``push_url``, no token store, or its card does not support push notifications)."""
        base = self.settings.push_url
        workflow_id = activity.info().workflow_id
        if base is None or self.tokens is None or not card.capabilities.push_notifications:
            return None
        if workflow_id is None:  # not a Run's call: nothing waits to be woken
            return None
        secret = new_secret()
        push = PeerPush(
            tenant=input.scope.tenant,
            principal=input.scope.principal,
            workflow_id=workflow_id,
            peer=input.peer.name,
            secret=secret,
        )
        try:
            push_id = await keep_push(self.tokens, push)
        except Exception:  # the store is down: the Run polls, as without push
            activity.logger.warning("A2A push for %s not kept; polling only", input.peer.name)
            return None
        url = f"{base.rstrip('/')}/{input.scope.tenant}/{push_id}"
        return TaskPushNotificationConfig(url=url, token=secret)

    async def _give_up(
        self,
        transport: ClientTransport,
        task: Task,
        input: A2aToolCall | A2aPollInput,
        context: ClientCallContext,
        redact: Redactor,
    ) -> None:
        """Cancel a task nobody will go on with (it waits for authentication this Run
        cannot give, or the call was cancelled in its hold), best effort: it would
        otherwise wait or work at the peer for good; a failure is logged, redacted."""
        try:
            await asyncio.wait_for(
                transport.cancel_task(
                    CancelTaskRequest(id=task.id, tenant=input.peer.tenant or ""), context=context
                ),
                self.settings.call_timeout_seconds,
            )
        except Exception as err:  # the call's own outcome stands; the task may stay waiting
            activity.logger.warning(
                "A2A peer %s: cancelling task %s failed: %s",
                input.peer.name,
                task.id,
                redact(describe(err)),
            )

    async def _question(
        self,
        input: A2aToolCall | A2aPollInput,
        task: Task,
        redact: Redactor,
        started: float,
        once: bool = False,
    ) -> ToolOutcome:
        """A task asking for input, for the Run's person: a ``wait`` whose token is
        ``A2A_QUESTION_TOKEN`` + the task id and whose content is the question."""
        said = task.status.message.parts if task.status.HasField("message") else ()
        asked = await self._store(
            input, "wait", redact(question_text(said) or "(no question text)"), started, once
        )
        return asked.model_copy(update={"wait_token": A2A_QUESTION_TOKEN + task.id})

    async def _store(
        self,
        input: A2aToolCall | A2aPollInput,
        status: Literal["ok", "error", "wait", "denied"],
        text: str,
        started: float,
        once: bool = False,
        unsent: bool = False,
    ) -> ToolOutcome:
        """``store_outcome`` (``once``: a message not safe to repeat may have been sent;
        ``unsent``: it provably was not)."""
        return await store_outcome(
            self.blobs,
            input.call_id,
            status,
            text,
            started=started,
            limit=input.large_result_bytes,
            once=once,
            unsent=unsent,
        )

    async def _request(
        self, input: A2aToolCall, connection: Connection
    ) -> Answer | tuple[Connection, ClientTransport, SendMessageRequest]:
        """What ``_send`` sends, or why nothing is sent (an ``Answer``, ``sent`` false):
        the peer's card is read here, before any of the message leaves."""
        peer = input.peer
        text = input.arguments.get(A2A_MESSAGE_ARGUMENT)
        task_id = input.arguments.get(A2A_TASK_ARGUMENT)
        if not isinstance(text, str) or not text.strip():
            said = f"{input.name} needs {A2A_MESSAGE_ARGUMENT}: the text to send"
            return Answer("error", said, sent=False)
        if task_id is not None and not isinstance(task_id, str):
            said = f"{A2A_TASK_ARGUMENT} must be a string (a task id)"
            return Answer("error", said, sent=False)
        settings = self.settings
        fetched, _ = await self.peers.card(
            peer, input.scope, connection, fetch_seconds=settings.card_timeout_seconds
        )
        transport = self.peers.transport(input.scope, connection, fetched.card)
        message = Message(
            # The Run and the call: the same on any retry, so a peer that deduplicates
            # message ids (as psych serve does) acts on it once.
            message_id=f"{input.run_id}/{input.call_id}"
            + (f"/answer-{input.answer}" if input.answer else ""),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            task_id=task_id or "",
        )
        message.metadata.update({"skill": input.skill})
        request = SendMessageRequest(
            tenant=peer.tenant or "",
            message=message,
            # The peer answers at once; a task it is still working on is read in ``_send``, then
            # (past the hold) on the Run's timer, so no HTTP request or activity slot is
            # held while a peer works for hours.
            configuration=SendMessageConfiguration(return_immediately=True),
        )
        push = await self._push_config(input, fetched.card)
        if push is not None:
            request.configuration.task_push_notification_config.CopyFrom(push)
        return connection, transport, request

    async def _send(
        self,
        input: A2aToolCall,
        connection: Connection,
        transport: ClientTransport,
        request: SendMessageRequest,
    ) -> Answer | Task:
        """Send the message; the answer, or the task when the peer still works on it past
        ``hold_seconds``."""
        peer, settings = input.peer, self.settings
        deadline = time.monotonic() + settings.call_timeout_seconds
        hold_until = time.monotonic() + settings.hold_seconds
        context = connection.context(settings.call_timeout_seconds)
        task: Task | None = None
        try:
            response = await self._beating(
                transport.send_message(request, context=context), deadline
            )
            if response.HasField("message"):
                return await answer_of_message(response.message)
            task = response.task
            while task.status.state not in TERMINAL | INTERRUPTED:
                if time.monotonic() + settings.poll_seconds > hold_until:
                    return task
                # Each read returns at once: without a heartbeat here an abort of the Run
                # would not reach the call before its hold ended.
                activity.heartbeat()
                await asyncio.sleep(settings.poll_seconds)
                task = await self._beating(
                    transport.get_task(
                        GetTaskRequest(id=task.id, tenant=peer.tenant or ""), context=context
                    ),
                    deadline,
                )
        except TimeoutError:
            if task is not None:  # the task was taken; reading it is slow: wait on it
                return task
            return Answer(
                "error",
                f"A2A peer {peer.name!r}: no answer within {settings.call_timeout_seconds:g} s",
            )
        except asyncio.CancelledError:
            if task is not None and task.status.state not in TERMINAL:
                # Cancelled in the hold (the Run aborted, the worker stopping): the Run never
                # learns this task's id, so nobody would read or cancel it; ask the peer to.
                await self._give_up(transport, task, input, context, connection.redact)
            raise
        except Exception as err:  # the SDK's and httpx's errors alike: the model reads them
            self.peers.forget(connection.key)
            if task is not None:
                # The peer took the message (the task exists): only a read in the hold
                # failed. The Run waits on the task durably and reads it again.
                return task
            said = f"A2A peer {peer.name!r}, skill {input.skill!r}: {describe(err)}"
            return Answer("error", said, sent=not never_sent(err))
        if input.questions_to_person and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return task
        if task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED:
            await self._give_up(transport, task, input, context, connection.redact)
        return await self._answer(task, input)

    async def _answer(self, task: Task, input: A2aToolCall | A2aPollInput) -> Answer:
        return await answer_of_task(
            task,
            peer=input.peer.name,
            tool=input.name,
            large_result_bytes=input.large_result_bytes,
            store=self.blobs.put,
            credential=input.peer.credential,
        )

    async def _beating(self, work: Awaitable[_T], deadline: float) -> _T:
        """Await ``work`` before ``deadline``, heartbeating meanwhile (so an abort reaches
        the call, and a worker that died is noticed)."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                done, _ = await asyncio.wait(
                    {task}, timeout=min(self.settings.heartbeat_seconds, left)
                )
                if task in done:
                    return task.result()
                activity.heartbeat()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
