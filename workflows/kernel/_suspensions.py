"""Pending items: holding a Run on one, its expiry, release, and resume validation.

A Run suspends on an approval, a question, an external completion or its children; each
item has an expiry from the SuspensionPolicy. A child Run's items are mirrored here too
(``Pending.run`` names the child), so the parent shows and validates them and forwards the
answer. Validation is written once and runs twice (update validator and handler), because
two updates can pass validation in one workflow task: exactly one decision is recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import assert_never

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.specs import printable
    from psych_runtime.workflows.contract._contract import (
        RefusalKind,
        ResumeInput,
        refusal,
    )
    from psych_runtime.workflows.contract._records import (
        Pending,
        RunStatus,
        Suspended,
        SuspensionExpired,
        SuspensionReason,
    )
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._record_log import RecordLog


@dataclass
class Wait:
    """One pending item of this Run and, once it came, its answer."""

    item: Pending
    answer: ResumeInput | None = None


class Suspensions:
    """What a Run waits for, its own items and its children's."""

    def __init__(
        self, log: RecordLog, *, changed: Callable[[], None], aborted: Callable[[], str | None]
    ) -> None:
        self._log = log
        self._changed = changed
        self._aborted = aborted
        self.waits: dict[str, Wait] = {}
        self.expired: set[str] = set()
        self.unrun: set[str] = set()
        """Calls whose approval wait a cancellation ended (the Run's deadline and grace ran
        out, or it was cancelled): they never ran."""
        self.answered: set[str] = set()
        """Ids of this Run's own items answered and released (a second answer is refused
        as such, not as an id nothing ever waited on)."""
        self.consents_refused: dict[str, str] = {}
        """An MCP server's name -> why a person refused its consent in this Run (patch
        ``psych-consent-refused``, ``_consent.py``): not asked again, its tools no longer
        offered (``features/_mcp.py``). Carried across continue-as-new (``RunCarry``)."""
        self.ended: Stop | None = None
        """The expiry that settles the Run ABANDONED, once one of its waits expired: every
        other wait ends with it (patch ``psych-expiry-ends-waits``)."""
        self._expiry = ""
        """The item whose expiry set ``ended``."""
        self.ended_by: dict[str, str] = {}
        """Ids of this Run's own items that another's expiry ended -> that item ("approval
        c-del"): an answer until the Run settles is refused as expired, naming it."""
        self.aborted_waits: set[str] = set()
        """Ids of this Run's own items an abort ended: an answer until the Run settles (its
        open calls still running) is refused as the abort's, not as an unknown id."""
        self.batch_open: Callable[[], int] = lambda: 0
        """How many calls of the running batch are not done yet (the tool-call kernel's)."""
        self.children: dict[str, tuple[Pending, ...]] = {}
        """A child's workflow id -> what it waits for (from its ``psych.child_pending``)."""
        self._report_seq: dict[str, int] = {}
        """A child's workflow id -> the number of its newest report taken."""
        self.working: set[str] = set()
        """Children that execute a call beside what they wait for (their last report)."""
        self.clocked: set[str] = set()
        """Running children whose work runs this Run's deadline clock: each of them works
        unless its last report lists something it waits for and no call beside it (an
        agent's subagents and spawned children started since the patch
        ``psych-clock-runs-with-children``, ``Handlers.adopt_child``)."""
        self._forwarded: dict[str, set[tuple[str, str | None]]] = {}
        """A child's workflow id -> the items (id, holder) answered here and forwarded to
        it, until a report of the child's no longer lists them (a report sent before the
        child saw the answer must not make them answerable again). Holder None: answered
        by id alone, which stands for every item of the child's with that id, as before
        answers could name their holder."""
        self._answered_in: dict[tuple[str, str], None] = {}
        """The children's items answered here and forwarded (id, holder), kept once the
        child no longer lists them: an answer sent again is refused as already answered,
        as one to this Run's own item is (``answered``), not as an id nothing waits on.
        A dict for its order (the first holder is the one a refusal names)."""

    def items(self) -> tuple[Pending, ...]:
        """Every pending item, this Run's first, then each child's, the children in the
        order they began waiting (a child that waited, then did not, goes last)."""
        own = tuple(w.item for w in self.waits.values())
        return own + tuple(item for items in self.children.values() for item in items)

    def details(self) -> str:
        """What each pending item waits for, a line each (the Run's current details), ``printable``:
        the Temporal UI shows them to an operator, and a tool call's arguments, a question or a
        spawn's description are the model's text. Only a query reads them (Temporal's metadata
        query): they are no command and no model input, so escaping them needs no patch."""
        waits: list[str] = []
        for item in self.items():
            match item.reason:
                case SuspensionReason.APPROVAL:
                    what = f"approval of {item.tool}({item.arguments[:200]})"
                case SuspensionReason.QUESTION:
                    what = f"an answer to {(item.question or '')[:200]!r}"
                case SuspensionReason.EXTERNAL:
                    what = f"completion of {item.tool} (token {item.id})"
                case SuspensionReason.AUTHORIZATION:
                    what = f"a person's consent for MCP server {item.tool}: open {item.question}"
                case SuspensionReason.CHILDREN if item.question:
                    what = f"spawned children {item.question[:200]}"
                case SuspensionReason.CHILDREN:
                    what = f"subagent Run {item.id}"
                case _:
                    assert_never(item.reason)
            where = f" in {item.run}" if item.run else ""
            until = item.expires_at.isoformat(timespec="seconds")
            waits.append(f"waiting for {what}{where} until {until} ({item.reason} {item.id})")
        return printable("\n".join(waits))

    def reasons(self) -> str | None:
        """The reasons waited on, sorted and comma-joined (the ``PsychSuspension`` value)."""
        return ",".join(sorted({item.reason for item in self.items()})) or None

    def waiting_only(self, open_calls: int) -> bool:
        """Whether the Run only waits: something is pending and no call is executing (its
        own, a child's that waits beside it, or a clocked child's that waits for nothing)."""
        if open_calls or self.working or any(run not in self.children for run in self.clocked):
            return False
        return bool(self.waits) or any(self.children.values())

    def newer_report(self, run: str, seq: int) -> bool:
        """Whether child ``run``'s report ``seq`` is newer than the last one taken (and
        take its number); a report without one (0) is always taken."""
        if seq == 0:
            return True
        if seq <= self._report_seq.get(run, 0):
            return False
        self._report_seq[run] = seq
        return True

    def set_child(self, run: str, pending: tuple[Pending, ...], working: bool = False) -> None:
        """Mirror what child ``run`` waits for now (nothing: forget it), and whether it
        executes a call beside it."""
        if working and pending:
            self.working.add(run)
        else:
            self.working.discard(run)
        # An item a grandchild holds keeps its holder's id; answers go through ``run``.
        mirrored = tuple(
            item if item.run is not None else item.model_copy(update={"run": run})
            for item in pending
        )
        keys = {_key(item) for item in mirrored} | {(item.id, None) for item in mirrored}
        forwarded = self._forwarded.get(run, set()) & keys
        if forwarded:
            self._forwarded[run] = forwarded
        else:
            self._forwarded.pop(run, None)
        pending = tuple(item for item in mirrored if not _within(item, forwarded))
        if pending:
            self.children[run] = pending
        else:
            self.children.pop(run, None)
        self._changed()

    def forward(self, run: str, item: Pending, *, named: bool) -> None:
        """Note that ``item``, mirrored from child ``run``, was answered here and forwarded
        (``named``: the answer named its holder; else it went by id alone)."""
        key = _key(item) if named else (item.id, None)
        self._forwarded.setdefault(run, set()).add(key)
        self._answered_in[_key(item)] = None
        remaining = tuple(p for p in self.children.get(run, ()) if not _within(p, {key}))
        if remaining:
            self.children[run] = remaining
        else:
            self.children.pop(run, None)
        self._changed()

    def child_of(self, item: Pending) -> str | None:
        """The direct child whose (mirrored) items include ``item``."""
        key = _key(item)
        return next(
            (run for run, items in self.children.items() if any(_key(i) == key for i in items)),
            None,
        )

    def check(self, input: ResumeInput) -> Pending:
        """The item ``input`` answers, or the refusal saying why it cannot be answered."""
        # ``input.run`` names the holder when one id is pending in more than one Run; without
        # it this Run's own item comes first, then the children's in start order.
        own = input.run is None or input.run == workflow.info().workflow_id
        wait = self.waits.get(input.id) if own else None
        child_item = next(
            (
                item
                for items in self.children.values()
                for item in items
                if item.id == input.id and (input.run is None or item.run == input.run)
            ),
            None,
        )
        if wait is None and child_item is None:
            forwarded = (key for keys in self._forwarded.values() for key in keys)
            if any(_answers(input, *key) for key in forwarded):
                raise refusal(
                    RefusalKind.ALREADY_ANSWERED,
                    f"{input.id!r} was already answered (forwarded to the child Run)",
                )
            if input.id in self.expired:
                raise refusal(RefusalKind.EXPIRED, f"{input.id!r} expired")
            if input.id in self.ended_by:
                said = f"{input.id!r} ended unanswered: {self.ended_by[input.id]} expired"
                raise refusal(RefusalKind.EXPIRED, f"{said}, and the Run settles abandoned")
            if input.id in self.aborted_waits:
                raise self.abort_refusal(input.id)
            if input.id in self.answered:
                raise refusal(RefusalKind.ALREADY_ANSWERED, f"{input.id!r} was already answered")
            holder = next((run for id, run in self._answered_in if _answers(input, id, run)), None)
            if holder is not None:
                raise refusal(
                    RefusalKind.ALREADY_ANSWERED,
                    f"{input.id!r} was already answered (forwarded to Run {holder})",
                )
            waiting = ", ".join(item.id for item in self.items())
            if not waiting:
                raise refusal(
                    RefusalKind.NOT_SUSPENDED,
                    f"the Run is not suspended: it waits for nothing (no {input.id!r})",
                )
            held = "" if input.run is None else f" held by Run {input.run!r}"
            raise refusal(
                RefusalKind.UNKNOWN_PENDING,
                f"nothing pending with id {input.id!r}{held} (pending: {waiting})",
            )
        if wait is not None and wait.answer is not None:
            raise refusal(RefusalKind.ALREADY_ANSWERED, f"{input.id!r} was already answered")
        item = wait.item if wait is not None else child_item
        assert item is not None
        if item.reason != input.reason:
            raise refusal(
                RefusalKind.WRONG_REASON,
                f"{input.id!r} waits for {item.reason}, not {input.reason}",
            )
        if workflow.now() >= item.expires_at:
            raise refusal(RefusalKind.EXPIRED, f"{input.id!r} expired")
        match input.reason:
            case SuspensionReason.APPROVAL if input.approved is None:
                raise refusal(RefusalKind.BAD_RESUME, "an approval needs approved=true or false")
            case SuspensionReason.QUESTION if input.answer is None:
                raise refusal(RefusalKind.BAD_RESUME, "an answer needs answer text")
            case (
                SuspensionReason.APPROVAL
                | SuspensionReason.QUESTION
                | SuspensionReason.EXTERNAL
                | SuspensionReason.AUTHORIZATION
            ):
                pass  # answered (any payload completes an external wait, null included)
            case _:
                assert_never(input.reason)
        return item

    def abort_refusal(self, pending_id: str) -> ApplicationError:
        """The refusal of an answer to ``pending_id``, a wait the Run's abort ended."""
        said = f"{pending_id!r} ended unanswered: the Run was {self._aborted() or 'aborted'}"
        return refusal(RefusalKind.NOT_SUSPENDED, f"{said}, and it settles aborted")

    async def suspend(self, item: Pending, expires_seconds: float) -> ResumeInput:
        """Wait for ``item`` to be answered; settle ABANDONED if it expires first."""
        wait = Wait(item)
        await self.hold(
            wait,
            lambda: wait.answer is not None,
            expires_seconds,
            f"{item.reason} {item.id} was not answered",
        )
        assert wait.answer is not None
        return wait.answer

    async def hold(
        self, wait: Wait, ready: Callable[[], bool], seconds: float, expired: str
    ) -> None:
        """Suspend on ``wait`` until ``ready()``.

        Raises:
            Stop: ABANDONED when ``seconds`` pass first (or another wait of the Run expired),
                ABORTED when an abort arrives.
        """
        item = wait.item
        if self.ended is not None:
            raise Stop(self.ended.outcome.status, self.ended.outcome.reason)
        self.waits[item.id] = wait
        self._log.add(Suspended(**self._log.stamp(), pending=item))
        self._changed()
        try:
            await workflow.wait_condition(
                lambda: ready() or self._aborted() is not None or self.ended is not None,
                timeout=seconds,
                timeout_summary=f"{item.reason} {item.id} expires",
            )
        except TimeoutError:
            self.release(item.id)
            self.expired.add(item.id)
            self._log.add(SuspensionExpired(**self._log.stamp(), reason=item.reason, id=item.id))
            stop = Stop(RunStatus.ABANDONED, f"suspension_expired: {expired} within {seconds:g} s")
            # The Run settles now: its other waits (calls of the same turn) end with it, and
            # so does a wait a call still executing would begin after it. A Run recorded
            # before waited each out, then settled as this expiry said. Asked only where
            # another wait is held or another call is open (this call's task is one), so a
            # Run with one call records no marker.
            others = self.waits or self.batch_open() > 1
            if others and workflow.patched("psych-expiry-ends-waits"):
                self.ended = stop
                self._expiry = f"{item.reason} {item.id}"
            raise stop from None
        except asyncio.CancelledError:
            # Deliberately not a `finally`: when a worker stops, the SDK leaves its cached
            # Runs to the garbage collector, which closes this coroutine (GeneratorExit)
            # outside any workflow, where the release's upsert would raise.
            self.release(item.id)
            if item.reason is SuspensionReason.APPROVAL:
                self.unrun.add(item.call_id)
            raise
        self.release(item.id)
        if ready():
            return
        if self._aborted() is None and self.ended is not None:
            raise self._ended_wait(item)
        self.aborted_waits.add(item.id)
        raise Stop(RunStatus.ABORTED, self._aborted() or "aborted")

    def _ended_wait(self, item: Pending) -> Stop:
        """The Stop of ``item``'s wait, which another's expiry ended (noted: an answer to
        it before the Run settles is refused as expired, ``check``)."""
        assert self.ended is not None
        self.ended_by[item.id] = self._expiry
        return Stop(self.ended.outcome.status, self.ended.outcome.reason)

    def release(self, pending_id: str) -> None:
        if self.waits.pop(pending_id).answer is not None:
            self.answered.add(pending_id)
        self._changed()


def expires_at(seconds: float) -> datetime:
    """When an item held from now for ``seconds`` expires."""
    return workflow.now() + timedelta(seconds=seconds)


def _key(item: Pending) -> tuple[str, str]:
    """A child's mirrored item: its id and the Run that holds it (always set once mirrored)."""
    assert item.run is not None
    return (item.id, item.run)


def _within(item: Pending, keys: set[tuple[str, str | None]]) -> bool:
    """Whether ``item`` is one of ``keys``: by its holder, or by its id alone."""
    return _key(item) in keys or (item.id, None) in keys


def _answers(input: ResumeInput, id: str, holder: str | None) -> bool:
    """Whether ``input`` names the item ``id`` that ``holder`` holds (None: every holder)."""
    return input.id == id and (input.run is None or holder is None or input.run == holder)
