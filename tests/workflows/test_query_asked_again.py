"""A query no worker answered is asked once more when the Run closed meanwhile: the
worker SDK drops queries it holds for a run it evicts as the run finishes (a status read
racing a Run's end was a "Timeout expired" 500 in the A2A push test), and a closed Run
answers at once. A Run closed before the query (even a moment before), or still running,
is not asked twice (`tests/e2e/test_interrupts.py` bounds such a read with no worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import NotFound
from psych_runtime.workflows.client._asked import query_run

TIMED_OUT = RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")


@dataclass
class Described:
    status: WorkflowExecutionStatus | None
    close_time: datetime | None


@dataclass
class FakeHandle:
    """Answers ``answers`` in order (an exception is raised); ``described`` is the Run (a
    closed one without a close time closed as it is looked at: after the query)."""

    answers: list[object]
    described: Described | RPCError
    asked: list[tuple[str, tuple[object, ...]]] = field(default_factory=list)

    async def query(self, name: str, *args: object, **_: object) -> object:
        self.asked.append((name, args))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def describe(self, **_: object) -> Described:
        if isinstance(self.described, RPCError):
            raise self.described
        closed = self.described.status is not WorkflowExecutionStatus.RUNNING
        if closed and self.described.close_time is None:  # closed while the query waited
            return Described(self.described.status, datetime.now(UTC))
        return self.described


async def ask(handle: FakeHandle, arg: object = None) -> Any:
    as_handle = cast(WorkflowHandle[Any, Any], handle)
    return await query_run(as_handle, "psych-acme-r1", "state", arg, str)


async def test_a_run_that_closed_while_its_query_waited_is_asked_again() -> None:
    closed_now = Described(WorkflowExecutionStatus.COMPLETED, None)
    handle = FakeHandle([TIMED_OUT, "done"], closed_now)
    assert await ask(handle, {"after": 3}) == "done"
    assert handle.asked == [("state", ({"after": 3},)), ("state", ({"after": 3},))]


async def test_the_second_timeout_is_raised() -> None:
    closed_now = Described(WorkflowExecutionStatus.FAILED, None)
    deadline = RPCError("deadline", RPCStatusCode.DEADLINE_EXCEEDED, b"")
    handle = FakeHandle([deadline, TIMED_OUT], closed_now)
    with pytest.raises(RPCError) as raised:
        await ask(handle)
    assert raised.value is TIMED_OUT
    assert len(handle.asked) == 2


@pytest.mark.parametrize(
    "described",
    [
        Described(WorkflowExecutionStatus.RUNNING, None),
        Described(WorkflowExecutionStatus.COMPLETED, datetime.now(UTC) - timedelta(minutes=5)),
        # Closed a moment before the query: with no worker, a second question only waits.
        Described(WorkflowExecutionStatus.CANCELED, datetime.now(UTC) - timedelta(seconds=1)),
        RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b""),
    ],
    ids=["running", "closed-before", "closed-just-before", "describe-failed"],
)
async def test_a_run_that_did_not_close_meanwhile_is_asked_once(
    described: Described | RPCError,
) -> None:
    handle = FakeHandle([TIMED_OUT, "never asked"], described)
    with pytest.raises(RPCError) as raised:
        await ask(handle)
    assert raised.value is TIMED_OUT
    assert len(handle.asked) == 1


async def test_other_failures_are_not_asked_again() -> None:
    closed_now = Described(WorkflowExecutionStatus.COMPLETED, None)
    missing = RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
    handle = FakeHandle([missing, "never asked"], closed_now)
    with pytest.raises(NotFound, match="no Run psych-acme-r1"):
        await ask(handle)
    assert len(handle.asked) == 1
