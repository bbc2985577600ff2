"""The poller of an A2A peer's task a Run waits on (``_a2a.py``): it reads the task on a
workflow timer (``psych.a2a.poll``, whose reads run the call's post hooks and store the
answer) until it ends, then completes the Run's wait with the answer, and notes that it
did (``PeersState.read``): a completion by hand is not a read, and ``_a2a.py`` puts it
through the call's post hooks."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        A2A_QUESTION_TOKEN,
        A2A_TASK_ARGUMENT,
        A2aPollInput,
        ToolOutcome,
    )
    from psych_runtime.workflows.contract._contract import ResumeInput
    from psych_runtime.workflows.contract._records import Resumed, SuspensionReason
    from psych_runtime.workflows.features._a2a_state import (
        PEER_QUESTION,
        POLL_FIRST_SECONDS,
        POLL_MAX_SECONDS,
        PeersState,
        cancelled,
    )
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._feature import RunView
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_result import shown


async def poll_task(run: RunView, state: PeersState, token: str, poll: A2aPollInput) -> None:
    """Read the peer's task on a timer until it ends, then complete the Run's wait on
    ``token`` with its answer (unless the wait ended first: expired, aborted, or
    completed by hand)."""
    waits = run.suspensions.waits
    delay = POLL_FIRST_SECONDS
    payload: str | dict[str, str] | None = None
    answer: ToolOutcome | None = None  # the peer's answer as its read stored it
    try:
        while True:
            await workflow.sleep(delay, summary=f"poll A2A {poll.peer.name} task")
            if token not in waits:
                return
            try:
                outcome = await calls.poll_a2a(poll, summary=f"poll {poll.name}")
            except ActivityError as err:
                if not cancelled(err) and run.patched("psych-a2a-poll-through-failures"):
                    # The peer, or the way to it, is down for now (a restart, a deploy):
                    # its task may go on; read again later, as the wait's expiry, an
                    # abort or a push allow. A peer that answers has its answer read.
                    delay = min(delay * 2, POLL_MAX_SECONDS)
                    continue
                text = f"Reading the task of A2A peer {poll.peer.name!r} failed: {cause_text(err)}"
                break
            if outcome.status != "wait":
                text, answer = shown(outcome), outcome
                break
            if (outcome.wait_token or "").startswith(A2A_QUESTION_TOKEN):
                # Asked for input: the wait ends with the question, for the person.
                text = f"A2A peer {poll.peer.name!r} asks: {outcome.content}"
                payload = {PEER_QUESTION: outcome.content, A2A_TASK_ARGUMENT: poll.task_id}
                break
            delay = min(delay * 2, POLL_MAX_SECONDS)
        wait = waits.get(token)
        if wait is None or wait.answer is not None:
            return
        by = f"a2a peer {poll.peer.name}"
        wait.answer = ResumeInput(
            reason=SuspensionReason.EXTERNAL,
            id=token,
            tenant=run.input.scope.tenant,
            by=by,
            payload=text if payload is None else payload,
        )
        state.read.add(token)
        if answer is not None:
            state.answers[token] = answer
        log = run.log
        log.add(
            Resumed(
                **log.stamp(),
                reason=SuspensionReason.EXTERNAL,
                id=token,
                by=by,
                outcome="completed",
                detail=text,
            )
        )
    finally:
        state.pollers.pop(token, None)
        state.polls.pop(token, None)
