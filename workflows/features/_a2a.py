"""A2A peers at an agent's turn boundaries: each allowed skill of each peer's Agent Card is
a tool ``<peer>__<skill>``, fixed within the turn; a call sends the peer one message.

At every boundary ``psych.a2a.cards`` (a local activity: one marker in history, only the
hash and statuses when nothing changed) fetches each card or reads the worker's cache for
the Scope, narrows and names the skills and stores them with the Run's own definitions;
the turn's model call is offered that blob. Replay reads the marker and never fetches.

A non-optional peer that is unreachable fails the Run naming it; an optional one is left
out and the model reads a ``[runtime]`` note when it goes away and when it answers again.
A call is ``psych.tool.a2a``, once (a peer message is not safe to repeat): a worker lost
mid-call makes it UNKNOWN, never sent twice. A peer asking for input: when the Spec allows
questions (``may_ask_questions``) the question goes to the Run's person (a ``question``
suspension on the call's id, answered by ``psych answer``; the deadline clock stops) and
the answer is sent to the peer in the same task, as often as it asks (also when it asks
after the Run waited on the task durably: the poller ends the wait with the question);
otherwise it is the tool's result, naming the question and the task id the model answers
with.

A task the peer still works on when the call's short hold ends does not keep an activity:
the call's outcome is a ``wait`` (its token ``a2a:<peer>:<task id>``), and this feature
suspends the Run on an external wait once the call has closed (as the kernel would: the
deadline clock stops; the wait expires after ``external_expires_seconds``), while a poller
of this feature reads the task (``psych.a2a.poll``) on a workflow timer, backing off from
2 s to 60 s (a failed read is made again), and completes the wait with the answer as a
``Resumed`` by the peer. Timers and reads are history, so the wait survives worker (and
peer) restarts; an operator may also complete it with ``psych.resume`` (the payload then
goes through the call's post hooks and is stored, ``kernel/_external_result.py``: the
poller's reads do both themselves), and a peer's push through ``psych serve``'s push route
completes it with ``A2A_PUSHED``: the task is then read at once.

A Run that settles while it still waits on a peer task (aborted, or the wait expired)
stops reading it and asks the peer to cancel it (``psych.a2a.cancel``, best
effort), recording the peer's answer as ``PeerTaskCanceled``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        A2A_MESSAGE_ARGUMENT,
        A2A_PUSHED,
        A2A_QUESTION_TOKEN,
        A2A_TASK_ARGUMENT,
        A2aCancelInput,
        A2aCardsInput,
        A2aPollInput,
        A2aToolCall,
        CatalogEntry,
        ChatMessage,
        ErrorType,
        ModelCallInput,
        ToolCallRequest,
        ToolOutcome,
    )
    from psych_runtime.specs import AgentSpec
    from psych_runtime.workflows.contract._records import (
        PeerDiscovered,
        PeerTaskCanceled,
        RunStatus,
        SuspensionReason,
    )
    from psych_runtime.workflows.features._a2a_poll import poll_task
    from psych_runtime.workflows.features._a2a_state import (
        PEER_QUESTION,
        PeersState,
        cancelled,
        take_cards,
    )
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._external_result import external_result
    from psych_runtime.workflows.kernel._feature import Feature, Handler, RunView
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_calls import (
        ABORTED_CALL,
        RESULT_LOST,
        UNKNOWN_OUTCOME,
    )
    from psych_runtime.workflows.kernel._tool_result import (
        ToolResult,
        from_outcome,
        inline,
    )


class Peers(Feature):
    """A2A peers: their skills offered at each turn boundary, and their calls."""

    name = "a2a"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.state = PeersState()

    def admit(self) -> None:
        spec = self.run.spec
        if isinstance(spec, AgentSpec):
            self.state.peers = {peer.name: peer for peer in spec.a2a_peers}

    async def boundary(self) -> None:
        state, run = self.state, self.run
        if not state.peers:
            return
        turn = run.turn + 1
        try:
            result = await calls.fetch_cards(
                A2aCardsInput(
                    run_id=run.input.run_id,
                    turn=turn,
                    peers=tuple(state.peers.values()),
                    scope=run.input.scope,
                    base_tools_ref=run.tools_ref,
                    known_hash=state.cards_hash,
                )
            )
        except (ActivityError, ApplicationError, TemporalTimeoutError) as err:
            # A local activity's non-retryable failure (or its last retryable one) arrives
            # as its own ApplicationError, live and on replay: a Run whose start did not ask
            # psych-a2a-cards-failure-settles raised it (the workflow failed unsettled). One
            # that timed out on its last attempt is an ActivityError live and its bare
            # TimeoutError where its marker replays; live the Run settled FAILED on the
            # ActivityError, patch or not, so the bare one settles every Run the same
            # (history a2a_cards_timed_out_before_patch).
            if isinstance(err, ApplicationError) and not run.patched(
                "psych-a2a-cards-failure-settles"
            ):
                raise
            raise Stop(RunStatus.FAILED, f"A2A cards: {cause_text(err)}") from err
        take_cards(state, result)
        log = run.log
        for status in result.peers:
            log.add(
                PeerDiscovered(
                    **log.stamp(),
                    turn=turn,
                    peer=status.peer,
                    status=status.status,
                    skills=status.skills,
                    card_hash=status.card_hash,
                    cached=status.cached,
                    error=status.error,
                )
            )
            name = status.peer
            if status.status == "unavailable":
                if not state.peers[name].optional:
                    raise Stop(
                        RunStatus.FAILED, f"A2A peer {name!r} is unreachable: {status.error}"
                    )
                if name not in state.unavailable:
                    state.unavailable.add(name)
                    state.notes.append(
                        f"[runtime] A2A peer {name!r} is unavailable ({status.error}); its "
                        "skills are not offered until it answers again."
                    )
            elif name in state.unavailable:
                state.unavailable.discard(name)
                state.notes.append(
                    f"[runtime] A2A peer {name!r} answers again; its skills are offered."
                )

    def into_call(self, call: ModelCallInput) -> ModelCallInput:
        state = self.state
        if state.cards_hash is None:
            return call
        notes = tuple(ChatMessage(role="user", content=note) for note in state.notes)
        state.notes = []
        return call.model_copy(
            update={"tools_ref": state.tools_ref, "new_messages": call.new_messages + notes}
        )

    def offered(self) -> Mapping[str, CatalogEntry]:
        return self.state.entries

    def tool_kinds(self) -> Mapping[str, Handler]:
        return {"a2a": self._call}

    def carry(self) -> Any:
        # Nothing: a continued Run fetches its peers' cards again at its first boundary
        # (without a known hash), so what it offers is whole either way; only the notes of
        # a peer already known to be down may be repeated once.
        return None

    async def settling(self) -> None:
        state = self.state
        open_tasks = [
            (token, state.polls[token])
            for token, poller in state.pollers.items()
            if not poller.done() and token in state.polls
        ]
        # Runs recorded before this settled without asking the peer.
        if open_tasks and self.run.patched("psych-a2a-cancel-peer-task"):
            for token, poll in open_tasks:
                # Nobody reads its answer any more: stop the reads, ask the peer to stop.
                state.pollers[token].cancel()
                await self._cancel(
                    A2aCancelInput(
                        run_id=poll.run_id,
                        call_id=poll.call_id,
                        peer=poll.peer,
                        task_id=poll.task_id,
                        scope=poll.scope,
                    )
                )
        # A task whose question no person answered would wait at the peer for good.
        asked = list(state.asked.values())
        if asked and self.run.patched("psych-a2a-cancel-asked-peer-task"):
            for cancel in asked:
                await self._cancel(cancel)

    async def _cancel(self, cancel: A2aCancelInput) -> None:
        """Ask the peer to cancel a task the Run no longer goes on with, and record what
        it answered (``peer_task_canceled``)."""
        try:
            done = await calls.cancel_a2a(cancel, summary=f"cancel A2A {cancel.peer.name} task")
            state_name, error = done.state, done.error
        except ActivityError as err:
            state_name, error = None, cause_text(err)
        log = self.run.log
        log.add(
            PeerTaskCanceled(
                **log.stamp(),
                peer=cancel.peer.name,
                task_id=cancel.task_id,
                call_id=cancel.call_id,
                state=state_name,
                error=error,
            )
        )

    def _message(
        self,
        call: ToolCallRequest,
        entry: CatalogEntry,
        arguments: dict[str, Any],
        *,
        questions_to_person: bool,
        answer: int = 0,
    ) -> A2aToolCall:
        """The ``psych.tool.a2a`` input of a message to ``entry``'s peer (the model's call,
        or the person's ``answer``-th answer in its task)."""
        run = self.run
        assert entry.server is not None and entry.tool is not None
        return A2aToolCall(
            run_id=run.input.run_id,
            call_id=call.id,
            peer=self.state.peers[entry.server],
            skill=entry.tool,
            name=entry.name,
            arguments=arguments,
            large_result_bytes=run.limits.large_result_bytes,
            scope=run.input.scope,
            report_through_client=not entry.safe_to_repeat,
            questions_to_person=questions_to_person,
            answer=answer,
        )

    async def _call(
        self, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        run = self.run
        entry = self.state.entries[call.name]
        assert entry.server is not None and entry.tool is not None
        ask = run.suspension.may_ask_questions
        outcome = await calls.call_tool(
            self._message(call, entry, arguments, questions_to_person=ask),
            entry,
            summary=f"tool {call.name}, turn {turn}",
        )
        return self._waited(turn, call, entry, arguments, outcome)

    def _waited(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        arguments: dict[str, Any],
        outcome: ToolOutcome,
        answers: int = 0,
    ) -> ToolResult:
        """The call's result: as the outcome says, or (a wait) the question to put to the
        person, or the poller of a task left working."""
        run = self.run
        assert entry.server is not None and entry.tool is not None
        if outcome.status != "wait" or outcome.wait_token is None:
            return from_outcome(call, outcome)
        if outcome.wait_token.startswith(A2A_QUESTION_TOKEN):
            task_id = outcome.wait_token.removeprefix(A2A_QUESTION_TOKEN)
            result = from_outcome(call, outcome)

            async def ask() -> ToolResult:
                return await self._ask_person(
                    turn, call, entry, task_id, outcome.content, answers + 1
                )

            result.then = ask
            return result
        # The peer still works: the Run suspends on the token; the poller ends the wait.
        token = f"a2a:{entry.server}:{outcome.wait_token}"
        # The post hooks on its answer see what was sent: a pre hook's rewrite. Asked only
        # when that differs (a Run recorded before polled with the model's arguments).
        sent = arguments if outcome.ran_arguments is None else outcome.ran_arguments
        if sent != arguments and workflow.patched("psych-a2a-poll-ran-arguments"):
            arguments = sent
        poll = A2aPollInput(
            run_id=run.input.run_id,
            call_id=call.id,
            peer=self.state.peers[entry.server],
            skill=entry.tool,
            name=entry.name,
            task_id=outcome.wait_token,
            arguments=arguments,
            large_result_bytes=run.limits.large_result_bytes,
            scope=run.input.scope,
            questions_to_person=run.suspension.may_ask_questions,
        )
        self._read_on(token, poll)
        waiting = from_outcome(call, outcome.model_copy(update={"wait_token": token}))

        async def wait() -> ToolResult:
            return await self._wait_on_task(turn, call, entry, token, poll, outcome, answers)

        # The wait is the feature's (the same suspension the kernel would make), so a
        # question the poller brings goes to the person and a peer's push reads the task.
        waiting.then = wait
        return waiting

    def _read_on(self, token: str, poll: A2aPollInput) -> None:
        """Start the poller of the peer task the Run waits on under ``token``."""
        self.state.polls[token] = poll
        self.state.pollers[token] = asyncio.create_task(
            poll_task(self.run, self.state, token, poll)
        )

    async def _wait_on_task(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        token: str,
        poll: A2aPollInput,
        waited: ToolOutcome,
        answers: int,
    ) -> ToolResult:
        """Suspend on the peer task's external wait (as the kernel does for a ``wait``)
        until the poller (or an operator) completes it; a question the peer asked meanwhile
        goes to the person, and their answer to the peer. A push from the peer (through
        ``psych serve``'s push route) completes it with ``PUSHED``: the task is read now,
        and waited for again while it still works."""
        if token in self.run.suspensions.waits:
            return inline(call, "error", f"another call already waits on token {token!r}")
        while True:
            given = await self.run.suspend_call(
                call,
                SuspensionReason.EXTERNAL,
                self.run.suspension.external_expires_seconds,
                id=token,
                question=waited.content,
            )
            payload = given.payload
            if not (isinstance(payload, dict) and set(payload) == {A2A_PUSHED}):
                # Answered (by the poller or by hand): nothing is left to cancel at the end.
                self.state.polls.pop(token, None)
                break
            try:
                read: ToolOutcome | None = await calls.poll_a2a(
                    poll, summary=f"read {poll.name} (pushed)"
                )
            except ActivityError as err:
                # The peer down after its push: wait on, its poller reads again.
                if cancelled(err) or not self.run.patched("psych-a2a-pushed-read-through-failures"):
                    self.state.polls.pop(token, None)
                    text = (
                        f"Reading the task of A2A peer {poll.peer.name!r} failed: {cause_text(err)}"
                    )
                    return inline(call, "error", text)
                read = None
            if read is not None and read.status != "wait":
                self.state.polls.pop(token, None)
                return from_outcome(call, read)
            if read is not None and (read.wait_token or "").startswith(A2A_QUESTION_TOKEN):
                self.state.polls.pop(token, None)
                return await self._ask_person(
                    turn, call, entry, poll.task_id, read.content, answers + 1
                )
            poller = self.state.pollers.get(token)
            if poller is None or poller.done():  # it saw the wait end: read on anew
                self._read_on(token, poll)
        # Taken now, whatever the payload: after a question the person answers, the same
        # task (the same token) may be waited on again, and completed by hand.
        by_read = token in self.state.read
        self.state.read.discard(token)
        answer = self.state.answers.pop(token, None)
        if isinstance(payload, dict) and set(payload) == {PEER_QUESTION, A2A_TASK_ARGUMENT}:
            return await self._ask_person(
                turn,
                call,
                entry,
                str(payload[A2A_TASK_ARGUMENT]),
                str(payload[PEER_QUESTION]),
                answers + 1,
            )
        if by_read:  # the peer's answer, hooked and stored by its read
            # As read: a failed task an on_error hook did not replace is an error, and the
            # record keeps what the hooks did (as a call answered at once, or a pushed read).
            # Asked as the poller's answer arrives, after its (not local) read.
            if answer is not None and workflow.patched("psych-a2a-polled-answer-as-read"):
                return from_outcome(call, answer)
            return inline(call, "ok", payload if isinstance(payload, str) else json.dumps(payload))
        # Completed by hand: the result arriving late, through the call's post hooks.
        run = self.run
        return await external_result(
            call, waited, payload, True, poll.arguments, run.input, run.limits, kind="a2a"
        )

    async def _ask_person(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        task_id: str,
        question: str,
        answer: int,
    ) -> ToolResult:
        """Put the peer's question to the Run's person (a ``question`` item: the call's id
        the first time, ``<call id>.<n>`` after), then send the answer in the peer's task."""
        run = self.run
        assert entry.server is not None and entry.tool is not None
        peer = self.state.peers[entry.server]
        item = call.id if answer == 1 else f"{call.id}.{answer}"
        # Until the answer is sent, a Run that settles (an abort, the question expiring:
        # ``suspend_call`` raises) cancels the task, which would wait at the peer for good.
        self.state.asked[item] = A2aCancelInput(
            run_id=run.input.run_id,
            call_id=call.id,
            peer=peer,
            task_id=task_id,
            scope=run.input.scope,
        )
        given = await run.suspend_call(
            call,
            SuspensionReason.QUESTION,
            run.suspension.question_expires_seconds,
            id=item,
            question=f"A2A peer {peer.name!r} asks (task {task_id}): {question}",
            arguments="",
        )
        self.state.asked.pop(item, None)
        arguments = {A2A_MESSAGE_ARGUMENT: given.answer or "", A2A_TASK_ARGUMENT: task_id}
        try:
            outcome = await calls.call_tool(
                self._message(call, entry, arguments, questions_to_person=True, answer=answer),
                entry,
                summary=f"tool {call.name}, answer {answer}, turn {turn}",
            )
        except ActivityError as err:
            # As the kernel settles a tool call's failure: the answer is a peer message too.
            if isinstance(err.__cause__, CancelledError):
                return inline(call, "aborted", ABORTED_CALL, counts=False)
            if isinstance(err.__cause__, TemporalTimeoutError):
                return inline(call, "unknown", UNKNOWN_OUTCOME, counts=False)
            cause = err.__cause__
            if isinstance(cause, ApplicationError) and cause.type == ErrorType.RESULT_NOT_KEPT:
                # Sent, then its outcome not kept: not an error inviting a second send.
                return inline(call, "unknown", RESULT_LOST, counts=False)
            return inline(call, "error", f"sending the answer failed: {cause_text(err)}")
        return self._waited(turn, call, entry, arguments, outcome, answer)
