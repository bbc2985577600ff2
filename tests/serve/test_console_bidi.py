"""The console shows a bidirectional override (U+202E, CVE-2021-42574) in model-written
text as its escape, in a real browser: in a task title, a component's label, the text
being written and the answer, so it cannot reorder the page around it (the API's JSON
keeps the exact string: ``tests/e2e/test_bidi_printed.py``).

The stream comes from a scripted loopback API built from the runtime's own types
(``tests/serve/_scripted_console.py``); the terminal's side is
``tests/workers/test_printable.py`` and ``tests/e2e/test_bidi_printed.py``.
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
from psych_runtime.specs import Metric, Task
from psych_runtime.workflows import (
    ComponentShown,
    ModelCallFinished,
    ModelCallStarted,
    RunSettled,
    RunState,
    RunStatus,
    TasksUpdated,
    TokenDelta,
    Totals,
    TurnStarted,
)
from tests.e2e._browser import browser_log, in_browser, require_browser, served
from tests.serve._scripted_console import STAMP, admitted, event, open_run, scripted_app, until

RUN = "psych-acme-bidi1"
RLO = "\u202e"
TITLE = f"pay {RLO}cod.exe"
LABEL = f"rate {RLO}%5.2"
ANSWER = f"Refunded {RLO}24 order"
CALL = "act-1#1"


class ScriptedApi:
    """A Run whose model wrote U+202E everywhere; the stream waits, with a call's text in
    flight, until the test has read it."""

    def __init__(self) -> None:
        self.finish = asyncio.Event()
        self.settled = False

    def state(self) -> RunState:
        return RunState(
            run_id=RUN,
            tenant="acme",
            agent="writer",
            version_hash="sha256:abc",
            status=RunStatus.COMPLETED if self.settled else RunStatus.RUNNING,
            answer=ANSWER if self.settled else None,
            turn=1,
            last_seq=7 if self.settled else 5,
            totals=Totals(turns=1, model_calls=1 if self.settled else 0),
            tasks=(Task(title=TITLE, status="in_progress"),),
        )

    async def stream(self) -> AsyncIterator[bytes]:
        yield b": connected\r\n\r\n"
        yield event("record", admitted("writer", "hi"), "1")
        yield event("record", TurnStarted(seq=2, **STAMP, turn=1), "2")
        tasks = (Task(title=TITLE, status="in_progress"),)
        yield event("record", TasksUpdated(seq=3, **STAMP, turn=1, call_id="c1", tasks=tasks), "3")
        metric = Metric(label=LABEL, value="2.5")
        shown = ComponentShown(seq=4, **STAMP, turn=1, call_id="c2", component=metric)
        yield event("record", shown, "4")
        started = ModelCallStarted(seq=5, **STAMP, turn=1, model="fake-model", attempt=1)
        yield event("record", started, "5")
        delta = TokenDelta(call=CALL, turn=1, n=1, text=f"so {RLO}far")
        yield event("delta", delta, f"5/{CALL}/1")
        await self.finish.wait()
        finished = ModelCallFinished(
            seq=6,
            **STAMP,
            turn=1,
            model="fake-model",
            text=ANSWER,
            usage=Usage(input_tokens=3, output_tokens=2),
            latency=Latency(queue_wait_ms=1.0, duration_ms=2.0),
        )
        yield event("record", finished, "6")
        self.settled = True
        settled = RunSettled(
            seq=7,
            **STAMP,
            status=RunStatus.COMPLETED,
            reason="answered",
            answer=ANSWER,
            totals=Totals(turns=1, model_calls=1),
        )
        yield event("record", settled, "7")
        yield b'event: end\r\ndata: {"last_seq": 7}\r\n\r\n'

    def app(self) -> Starlette:
        async def state(request: Request) -> Response:
            return JSONResponse(self.state().model_dump(mode="json"))

        async def events(request: Request) -> Response:
            return StreamingResponse(self.stream(), media_type="text/event-stream")

        return scripted_app(RUN, state=state, events=events)


def _text(driver: Chrome, css: str) -> str:
    return "\n".join(node.text for node in driver.find_elements(By.CSS_SELECTOR, css))


def _follow(driver: Chrome, base: str, loop: asyncio.AbstractEventLoop, api: ScriptedApi) -> None:
    open_run(driver, base, RUN)
    until(driver, lambda d: bool(_text(d, "#inflight .delta-text")))
    assert _text(driver, "#inflight .delta-text") == "so \\u202efar"
    loop.call_soon_threadsafe(api.finish.set)
    until(driver, lambda d: d.find_element(By.ID, "run-status").text == "completed")
    until(driver, lambda d: bool(_text(d, "#answer pre")))
    assert _text(driver, "#answer pre") == "Refunded \\u202e24 order"
    records = _text(driver, "#records")
    assert "[in_progress] pay \\u202ecod.exe" in records
    assert '"label": "rate \\u202e%5.2"' in records
    assert "Refunded \\u202e24 order" in _text(driver, "#records [data-kind=model_call_finished]")
    page = driver.find_element(By.TAG_NAME, "body").text
    assert RLO not in page
    assert [e for e in browser_log(driver) if e.get("level") == "SEVERE"] == []


async def test_the_console_shows_a_bidi_override_escaped(tmp_path: Path) -> None:
    require_browser()
    api = ScriptedApi()
    async with served(api.app()) as base:
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _follow(d, base, loop, api)
        )
