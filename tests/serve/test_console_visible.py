"""The console's ``visible`` (``dom.js``) escapes what the terminal's ``printable`` escapes,
the same way, in a real browser: C0 and C1 control characters (an ESC, a NUL, a lone CR)
as well as the bidirectional overrides; newline, tab and a line-ending CR stay. And a
model's text written with an ESC and a NUL is shown escaped on the run page. The
bidirectional overrides in each place: ``tests/serve/test_console_bidi.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from psych_runtime.specs import printable
from psych_runtime.workflows import RunState, RunStatus, TokenDelta, Totals, TurnStarted
from tests.e2e._browser import browser_log, in_browser, require_browser, served
from tests.serve._scripted_console import STAMP, admitted, event, open_run, scripted_app, until

RUN = "psych-acme-visible1"
CALL = "act-1#1"
WRITTEN = "red \x1b[31mtext\x1b[0m and\x00 a\x7f \x85end"

SAMPLES = (
    "plain words, שלום 你好 \u200e\u200f",
    "\x1b]8;;https://evil.test\x07here\x1b]8;;\x07",
    "\x9b2J \x7f \x00 \x01\x1f \x80\x9f \xa0",
    "one\r\ntwo\tthree\rfour\n\x0b\x0c\r",
    "a\u202eb \u2066c\u2069 \u202a\u202b\u202c\u202d \u2067\u2068",
    "already \\x1b and \\u202e",
    "".join(map(chr, range(0xA0))),
)

_VISIBLE = """
const [samples, done] = arguments;
import("./dom.js").then(
  (dom) => done(samples.map((text) => dom.visible(text))),
  (error) => done(`import failed: ${error}`),
);
"""


def _state() -> RunState:
    return RunState(
        run_id=RUN,
        tenant="acme",
        agent="writer",
        version_hash="sha256:abc",
        status=RunStatus.RUNNING,
        turn=1,
        last_seq=2,
        totals=Totals(turns=1),
    )


async def _stream() -> AsyncIterator[bytes]:
    yield b": connected\r\n\r\n"
    yield event("record", admitted("writer", "hi"), "1")
    yield event("record", TurnStarted(seq=2, **STAMP, turn=1), "2")
    yield event("delta", TokenDelta(call=CALL, turn=1, n=1, text=WRITTEN), f"2/{CALL}/1")
    await asyncio.Event().wait()  # the stream stays open, as a Run's does


async def state(request: Request) -> Response:
    return JSONResponse(_state().model_dump(mode="json"))


async def events(request: Request) -> Response:
    return StreamingResponse(_stream(), media_type="text/event-stream")


def _check(driver: Chrome, base: str) -> None:
    driver.get(f"{base}/console/")
    shown = driver.execute_async_script(_VISIBLE, list(SAMPLES))
    assert shown == [printable(text) for text in SAMPLES]
    open_run(driver, base, RUN)
    until(driver, lambda d: bool(d.find_elements(By.CSS_SELECTOR, "#inflight .delta-text")))
    text = driver.find_element(By.CSS_SELECTOR, "#inflight .delta-text").text
    assert text == "red \\x1b[31mtext\\x1b[0m and\\x00 a\\x7f \\x85end"
    assert [e for e in browser_log(driver) if e.get("level") == "SEVERE"] == []


async def test_visible_escapes_controls_as_printable_does(tmp_path: Path) -> None:
    require_browser()
    async with served(scripted_app(RUN, state=state, events=events)) as base:
        await asyncio.to_thread(in_browser, tmp_path / "profile", lambda d: _check(d, base))
