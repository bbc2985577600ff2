"""The console never draws a state read older than the records it has shown, in a real
browser (``workers/serve/console/static/run.js``).

A read of the Run's state can be in flight when a record that changes the state arrives
(here ``run_settled``): its answer then says less than the page already knows, and drawn,
it would put back the status and the pending approval the record had ended. The scripted
API below holds each state read until the test answers it, so the order is the test's:
a read goes out after ``resumed``, ``run_settled`` arrives, the held read is answered with
what was true before (still suspended, the approval pending), and the page must keep
showing the settled Run until the read that ``run_settled`` asked for answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from psych_runtime.workflows import (
    Pending,
    Resumed,
    RunSettled,
    RunState,
    RunStatus,
    Suspended,
    SuspensionReason,
    Totals,
    TurnStarted,
)
from tests.e2e._browser import browser_log, in_browser, require_browser, served
from tests.serve._scripted_console import (
    AT,
    STAMP,
    admitted,
    event,
    open_run,
    scripted_app,
    until,
)

RUN = "psych-acme-stale1"
APPROVAL = Pending(
    reason=SuspensionReason.APPROVAL,
    id="call-refund",
    call_id="call-refund",
    tool="refund",
    arguments='{"order_id": "42"}',
    expires_at=AT + timedelta(days=1),
)
ITEM = ".pending-item[data-reason=approval][data-id=call-refund]"


def _state(status: RunStatus, last_seq: int, *, pending: bool, calls: int = 0) -> RunState:
    return RunState(
        run_id=RUN,
        tenant="acme",
        agent="refunds",
        version_hash="sha256:abc",
        status=status,
        answer="Refunded." if status is RunStatus.COMPLETED else None,
        turn=1,
        last_seq=last_seq,
        totals=Totals(turns=1, model_calls=calls),
        pending=(APPROVAL,) if pending else (),
    )


SUSPENDED = _state(RunStatus.SUSPENDED, 3, pending=True)


class HeldReads:
    """A Run's event stream released step by step, and state reads answered by the test
    (once ``holding`` is set; before that, each is answered with ``SUSPENDED``)."""

    def __init__(self) -> None:
        self.holding = False
        self.reads: asyncio.Queue[asyncio.Future[RunState]] = asyncio.Queue()
        self.resume = asyncio.Event()
        self.settle = asyncio.Event()

    async def stream(self) -> AsyncIterator[bytes]:
        yield b": connected\r\n\r\n"
        yield event("record", admitted("refunds", "refund order 42"), "1")
        yield event("record", TurnStarted(seq=2, **STAMP, turn=1), "2")
        yield event("record", Suspended(seq=3, **STAMP, pending=APPROVAL), "3")
        await self.resume.wait()
        resumed = Resumed(
            seq=4,
            **STAMP,
            reason=SuspensionReason.APPROVAL,
            id="call-refund",
            outcome="approved",
            by="ops",
        )
        yield event("record", resumed, "4")
        await self.settle.wait()
        settled = RunSettled(
            seq=5,
            **STAMP,
            status=RunStatus.COMPLETED,
            reason="answered",
            answer="Refunded.",
            totals=Totals(turns=1),
        )
        yield event("record", settled, "5")
        yield b'event: end\r\ndata: {"last_seq": 5}\r\n\r\n'

    def app(self) -> Starlette:
        async def state(request: Request) -> Response:
            if not self.holding:
                return JSONResponse(SUSPENDED.model_dump(mode="json"))
            answer: asyncio.Future[RunState] = asyncio.get_running_loop().create_future()
            await self.reads.put(answer)
            return JSONResponse((await answer).model_dump(mode="json"))

        async def events(request: Request) -> Response:
            return StreamingResponse(self.stream(), media_type="text/event-stream")

        return scripted_app(RUN, state=state, events=events)


def _shown(driver: Chrome) -> tuple[str, int]:
    """The status badge's text and how many pending items the page shows."""
    status = driver.find_element(By.ID, "run-status").text
    return status, len(driver.find_elements(By.CSS_SELECTOR, ".pending-item"))


def _follow(
    driver: Chrome, base: str, loop: asyncio.AbstractEventLoop, api: HeldReads
) -> list[tuple[str, int]]:
    """Walk the page through the race; returns what it showed at each step."""

    def next_read() -> asyncio.Future[RunState]:
        waiting = asyncio.wait_for(api.reads.get(), timeout=20)
        return asyncio.run_coroutine_threadsafe(waiting, loop).result(timeout=30)

    def answer(read: asyncio.Future[RunState], state: RunState) -> None:
        loop.call_soon_threadsafe(read.set_result, state)

    open_run(driver, base, RUN)
    until(driver, lambda d: _shown(d) == ("suspended", 1))
    assert driver.find_elements(By.CSS_SELECTOR, ITEM)
    shown = [_shown(driver)]

    api.holding = True
    loop.call_soon_threadsafe(api.resume.set)
    # `resumed` asks for a read; it is held while `run_settled` arrives.
    stale = next_read()
    loop.call_soon_threadsafe(api.settle.set)
    until(driver, lambda d: _shown(d) == ("completed", 0))
    shown.append(_shown(driver))
    # Answered now with what was true before `resumed`: older than what the page shows.
    answer(stale, SUSPENDED.model_copy(update={"last_seq": 4}))
    # The page asks again once it has handled that answer (its reads run one at a time).
    fresh = next_read()
    shown.append(_shown(driver))
    # Only this read says two model calls: drawn, it shows them (its last_seq is the
    # newest record's, so it is not stale).
    answer(fresh, _state(RunStatus.COMPLETED, 5, pending=False, calls=2))
    until(driver, lambda d: "2 model calls" in d.find_element(By.ID, "run-facts").text)
    shown.append(_shown(driver))
    assert [e for e in browser_log(driver) if e.get("level") == "SEVERE"] == []
    return shown


async def test_a_state_read_older_than_the_records_shown_is_not_drawn(tmp_path: Path) -> None:
    require_browser()
    api = HeldReads()
    async with served(api.app()) as base:
        loop = asyncio.get_running_loop()
        shown = await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _follow(d, base, loop, api)
        )
    assert shown == [
        ("suspended", 1),  # the approval waits
        ("completed", 0),  # run_settled: nothing waits any more
        ("completed", 0),  # the stale read (suspended, the approval pending) not drawn
        ("completed", 0),  # the fresh read drawn
    ]
