"""The console's live view against the event stream's contract, in a real browser: the
text of a model call in flight as it arrives, an attempt's text dropped on
``deltas_dropped``, a cut connection resumed with ``Last-Event-ID`` (nothing lost, nothing
twice), and the deltas replaced by the call's record.

The stream comes from a scripted loopback API built from the runtime's own types (Records,
TokenDelta, DeltasDropped, RunState), so each step waits until the page has shown the
last one; the real API drives the console end to end in ``tests/e2e/test_console.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from psych_runtime.activities.contract import Latency, Usage
from psych_runtime.workflows import (
    DeltasDropped,
    ModelCallFinished,
    ModelCallStarted,
    RunSettled,
    RunState,
    RunStatus,
    TokenDelta,
    Totals,
    TurnStarted,
)
from tests.e2e._browser import browser_log, in_browser, require_browser, served
from tests.serve._scripted_console import STAMP, admitted, event, open_run, scripted_app, until

RUN = "psych-acme-live1"
FIRST, SECOND = "act-1#1", "act-1#2"


class ScriptedApi:
    """A Run's state and event stream, released step by step by the test."""

    def __init__(self) -> None:
        self.resumed_from: list[str | None] = []
        self.cut = asyncio.Event()
        self.finish = asyncio.Event()
        self.settled = False

    def state(self) -> RunState:
        return RunState(
            run_id=RUN,
            tenant="acme",
            agent="writer",
            version_hash="sha256:abc",
            status=RunStatus.COMPLETED if self.settled else RunStatus.RUNNING,
            answer="Good day" if self.settled else None,
            turn=1,
            last_seq=5 if self.settled else 3,
            totals=Totals(turns=1, model_calls=1 if self.settled else 0),
        )

    async def first(self) -> AsyncIterator[bytes]:
        yield b": connected\r\n\r\n"
        yield event("record", admitted("writer", "hi"), "1")
        yield event("record", TurnStarted(seq=2, **STAMP, turn=1), "2")
        started = ModelCallStarted(seq=3, **STAMP, turn=1, model="fake-model", attempt=1)
        yield event("record", started, "3")
        for n, text in ((1, "Hel"), (2, "lo")):
            yield event("delta", TokenDelta(call=FIRST, turn=1, n=n, text=text), f"3/{FIRST}/{n}")
        dropped = DeltasDropped(call=FIRST, turn=1, reason="503 from the model")
        yield event("deltas_dropped", dropped, f"3/{FIRST}/3")
        yield event("delta", TokenDelta(call=SECOND, turn=1, n=1, text="Good"), f"3/{SECOND}/1")
        await self.cut.wait()  # then the connection ends without `end`: the page reconnects

    async def resumed(self) -> AsyncIterator[bytes]:
        yield event("delta", TokenDelta(call=SECOND, turn=1, n=2, text=" day"), f"3/{SECOND}/2")
        await self.finish.wait()
        finished = ModelCallFinished(
            seq=4,
            **STAMP,
            turn=1,
            model="fake-model",
            text="Good day",
            usage=Usage(input_tokens=3, output_tokens=2),
            latency=Latency(queue_wait_ms=1.0, duration_ms=2.0),
        )
        yield event("record", finished, "4")
        self.settled = True
        settled = RunSettled(
            seq=5,
            **STAMP,
            status=RunStatus.COMPLETED,
            reason="answered",
            answer="Good day",
            totals=Totals(turns=1, model_calls=1),
        )
        yield event("record", settled, "5")
        yield b'event: end\r\ndata: {"last_seq": 5}\r\n\r\n'

    def app(self) -> Starlette:
        async def state(request: Request) -> Response:
            return JSONResponse(self.state().model_dump(mode="json"))

        async def events(request: Request) -> Response:
            assert request.headers["authorization"] == "Bearer k"
            last = request.headers.get("last-event-id")
            self.resumed_from.append(last)
            body = self.first() if last is None else self.resumed()
            return StreamingResponse(body, media_type="text/event-stream")

        return scripted_app(RUN, state=state, events=events)


def _texts(driver: Chrome, css: str) -> list[str]:
    return [node.text for node in driver.find_elements(By.CSS_SELECTOR, css)]


def _follow(driver: Chrome, base: str, loop: asyncio.AbstractEventLoop, api: ScriptedApi) -> None:
    open_run(driver, base, RUN)
    # The first attempt's text went away with its drop; the second's is being written.
    until(driver, lambda d: _texts(d, "#inflight .delta-text") == ["Good"])
    assert len(_texts(driver, "#inflight .dropped")) == 1
    assert "Hello" not in driver.find_element(By.ID, "inflight").text
    driver.execute_script("window.__sameDocument = true")
    loop.call_soon_threadsafe(api.cut.set)
    until(driver, lambda d: _texts(d, "#inflight .delta-text") == ["Good day"])
    loop.call_soon_threadsafe(api.finish.set)
    until(driver, lambda d: d.find_element(By.ID, "run-status").text == "completed")
    until(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#inflight .inflight"))
    seqs = [
        n.get_attribute("data-seq") for n in driver.find_elements(By.CSS_SELECTOR, "#records li")
    ]
    assert seqs == ["1", "2", "3", "4", "5"]
    finished = driver.find_element(By.CSS_SELECTOR, "#records [data-kind=model_call_finished]")
    assert "Good day" in finished.text and "3 in / 2 out tokens" in finished.text
    assert driver.find_element(By.CSS_SELECTOR, "#answer pre").text == "Good day"
    assert driver.execute_script("return window.__sameDocument === true") is True
    assert [e for e in browser_log(driver) if e.get("level") == "SEVERE"] == []


async def test_the_live_view_shows_deltas_and_resumes_where_it_was_cut(tmp_path: Path) -> None:
    require_browser()
    api = ScriptedApi()
    async with served(api.app()) as base:
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _follow(d, base, loop, api)
        )
    assert api.resumed_from == [None, f"3/{SECOND}/1"]
