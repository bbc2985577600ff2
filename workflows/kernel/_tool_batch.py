"""A turn's batch of tool calls: run together, recorded and guarded in call order.

The calls of a batch run concurrently (each through ``_tool_calls``' pipeline), within the
Run's caps: a call past ``max_tool_calls_per_turn`` or ``max_steps``, or whose id an
earlier call of the turn has, is not run. Results are recorded and the guards updated in
call order after every call of the batch has finished; a hard stop then stops the Run.

Identical calls of one turn (same tool, same canonical arguments) are held to the repeat
guard as calls of successive turns are: a call the guard could refuse once the identical
calls before it have returned waits for them, then reads the guard as their results leave
it (``_guards.queued_repeats``, ``seen_after``), so calls past ``repeat_call_threshold``
with the same result are refused, not run, and their refusals reach
``repeat_call_hard_stop`` in the turn. Until 12-06 every call of such a turn ran at once
(five identical calls under a hard stop of three all ran, and the Run went on); a Run
recorded before the patch ``psych-repeat-calls-in-a-turn`` (asked only for a turn with a
queued call) ran them so. A queued call starts nothing once the deadline passed, the Run
was aborted or an expiry settles it while it waited (the last two since the patch
``psych-queued-calls-stop``, asked beside it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import CatalogEntry, ChatMessage, ToolCallRequest
    from psych_runtime.workflows.contract._contract import RunInput
    from psych_runtime.workflows.contract._records import RunStatus, ToolCallStarted, ToolWithheld
    from psych_runtime.workflows.kernel import _guards as guards
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._tool_calls import ToolCalls
    from psych_runtime.workflows.kernel._tool_result import (
        Batch,
        ToolResult,
        cut_short,
        finished,
        guarded_ref,
        inline,
        not_run,
        refused_repeated_id,
    )


class ToolBatches(ToolCalls):
    """The batches of tool calls of a Run kind that calls tools (both kinds do)."""

    def __init__(self, input: RunInput | str) -> None:
        super().__init__(input)
        self._batch: Batch = (0, [], [])
        """The running batch's turn and calls with their tasks: what ``_unknown`` records."""
        self._suspensions.batch_open = lambda: sum(not t.done() for _, t in self._batch[1])
        self._queued: set[str] = set()
        """Ids of the calls waiting for the identical calls before them in their turn."""

    def batch_calls(self, turn: int) -> tuple[tuple[ToolCallRequest, asyncio.Task[Any]], ...]:
        """The running batch's calls with their tasks, when it is ``turn``'s."""
        running, calls, _ = self._batch
        return tuple(calls) if running == turn else ()

    def _batch_size(self) -> int:
        return len(self._batch[1])

    async def _run_tools(
        self, turn: int, batch: tuple[ToolCallRequest, ...], offered: dict[str, CatalogEntry]
    ) -> tuple[list[ToolResult], list[ChatMessage | str]]:
        """Run a batch of calls concurrently; their results (in call order) and the notes
        the model should read after them."""
        limits = self._limits
        room = max(min(limits.max_tool_calls_per_turn, limits.max_steps - self._totals.steps), 0)
        for call in batch:
            self._log.add(
                ToolCallStarted(
                    **self._log.stamp(),
                    turn=turn,
                    call_id=call.id,
                    tool=call.name,
                    arguments=call.arguments,
                )
            )
        # Counted before they run, so a Run force-settled mid-turn still counts its calls.
        self.count(steps=len(batch[:room]), tool_calls=len(batch))
        repeats = guards.repeated_ids([call.id for call in batch[:room]])
        # A Run recorded before this check ran every call of such a batch: the patch is
        # asked only on the path that changed, so no other Run records its marker.
        if repeats and not workflow.patched("psych-unique-call-ids"):
            repeats = set()
        queued = guards.queued_repeats(
            self._guards, [(c.name, c.arguments) for c in batch[:room]], limits, skip=repeats
        )
        # Likewise: a Run recorded before ran identical calls of a turn all at once.
        if queued and not workflow.patched("psych-repeat-calls-in-a-turn"):
            queued = {}
        # A queued call that stops once an abort or an expiry came while it waited (a Run
        # recorded before went on to its policy and its call). Asked here, where the batch
        # starts after a model call, not as the wait ends: that can follow a local call's
        # resolution, in a workflow task that differs on replay.
        stops = bool(queued) and workflow.patched("psych-queued-calls-stop")
        tasks: list[asyncio.Task[ToolResult]] = []
        for index, call in enumerate(batch[:room]):
            if index in repeats:
                task = asyncio.create_task(refused_repeated_id(call))
            elif index in queued:
                before = [tasks[earlier] for earlier in queued[index]]
                waiting = self._queued_tool(turn, call, offered, before, stops=stops)
                task = asyncio.create_task(waiting)
            else:
                task = asyncio.create_task(self._run_tool(turn, call, offered))
            tasks.append(task)
        # Not run by the Run's own caps, which is no failure of the tool: counted toward its
        # failure streak, they withheld (and then failed the Run on) a tool that had not
        # failed once. A Run recorded before patch psych-batch-accounting counted them.
        counts = False if self._start.batch_accounting else None
        over = [  # the reason made only when a call is over (not on every turn)
            inline(call, "error", guards.over_cap_reason(position, limits), counts=counts)
            for position, call in enumerate(batch[room:], start=room)
        ]
        self._batch = (turn, list(zip(batch[:room], tasks, strict=True)), over)
        # Every call is waited for and recorded before any stop takes effect: an abort or an
        # expiry raised by one call must not leave the batch's other calls unrecorded (a
        # non-interruptible one finishes, and its result is recorded).
        stop: Stop | None = None
        results: list[ToolResult] = []
        for call, outcome in zip(
            batch[:room], await asyncio.gather(*tasks, return_exceptions=True), strict=True
        ):
            if isinstance(outcome, ToolResult):
                results.append(outcome)
            elif isinstance(outcome, Stop):
                stop = stop or outcome
                results.append(not_run(call, outcome))
            else:
                raise outcome
        self._batch = (0, [], [])
        results.extend(over)
        notes: list[ChatMessage | str] = []
        for result in results:
            try:
                self._after_tool(turn, result, notes)
            except Stop as hard_stop:
                stop = stop or hard_stop
        if stop is not None:
            raise stop
        return results, notes

    async def _queued_tool(
        self,
        turn: int,
        call: ToolCallRequest,
        offered: dict[str, CatalogEntry],
        before: list[asyncio.Task[ToolResult]],
        *,
        stops: bool,
    ) -> ToolResult:
        """A call the repeat guard could refuse once the identical calls ``before`` it in
        its turn have returned: it waits for them, as if they had been made in earlier
        turns, then runs with the guard as their results leave it. It starts nothing once
        one of them stopped the Run, or the deadline passed meanwhile, nor (``stops``,
        patch ``psych-queued-calls-stop``) once the Run was aborted or an expiry settles
        it: a Run recorded before asked its policy then, and ran it when the expiry came
        from another call of the turn."""
        # Left in the set when the wait is cancelled (the Run settling without the batch):
        # ``_unknown`` then records the call aborted, as never run.
        self._queued.add(call.id)
        await workflow.wait(before)
        self._queued.discard(call.id)
        earlier: list[tuple[bool, str | None]] = []
        for task in before:
            outcome = task.exception() or task.result()
            if isinstance(outcome, Stop):
                raise outcome
            if isinstance(outcome, ToolResult):
                earlier.append((outcome.repeat_refusal, guarded_ref(outcome)))
            # Any other exception is the pipeline's defect, raised by ``_run_tools``.
        if self._past_deadline():
            deadline = self._deadline_outcome()
            raise Stop(deadline.status, deadline.reason)
        if stops:
            self.check_abort()
            ended = self._suspensions.ended
            if ended is not None:
                raise Stop(ended.outcome.status, ended.outcome.reason)
        seen = guards.seen_after(self._guards, call.name, call.arguments, earlier, self._limits)
        return await self._run_tool(turn, call, offered, seen=seen)

    def _unknown(self, open_calls: dict[str, tuple[int, str]], why: str) -> None:
        """Record the calls of the batch in flight as the Run settles without waiting for
        it (deadline and grace ran out, or it was cancelled), as ``cut_short`` says. A Run
        recorded before patch psych-batch-accounting recorded only calls executing, UNKNOWN."""
        turn, batch, over = self._batch
        self._batch = (0, [], [])
        if not self._start.batch_accounting:
            super()._unknown(open_calls, why)
            return
        cut = cut_short(batch, why, unrun=self._suspensions.unrun, queued=self._queued)
        self._queued = set()
        for result in [*cut, *over]:  # the calls past the caps last
            self._record_finished(turn, result)

    def _after_tool(self, turn: int, result: ToolResult, notes: list[ChatMessage | str]) -> None:
        """Record one finished call and update the guards, in call order."""
        self._record_finished(turn, result)
        call = result.call
        outcome = result.outcome
        if result.repeat_refusal:
            verdict = guards.after_refusal(self._guards, call.name, call.arguments, self._limits)
        else:
            verdict = guards.after_result(
                self._guards,
                call.name,
                call.arguments,
                ok=result.status == "ok",
                counts_as_failure=result.counts_as_failure,
                result_ref=guarded_ref(result),
                limits=self._limits,
            )
        if outcome is not None and outcome.unpermitted and call.name not in self._revoked:
            # The tenant's permits refused the call (a permit revoked since the catalogue):
            # the tool is offered no more, and the model told. Only a tool activity of today
            # marks an outcome so: no recorded Run takes this path.
            self._revoked[call.name] = result.content
            notes.append(
                ChatMessage(
                    role="user",
                    content=guards.revoked_note(
                        call.name, result.content, told=self._start.unpermitted_told
                    ),
                )
            )
        if verdict.hard_stop is not None:
            raise Stop(RunStatus.FAILED, verdict.hard_stop)
        if verdict.withhold is not None:
            self._log.add(
                ToolWithheld(**self._log.stamp(), tool=call.name, failures=verdict.withhold)
            )
            notes.append(
                ChatMessage(role="user", content=guards.withheld_note(call.name, verdict.withhold))
            )

    def _record_finished(self, turn: int, result: ToolResult) -> None:
        self._log.add(finished(self._log.stamp(), turn, result))
