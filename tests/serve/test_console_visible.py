"""The console's ``visible`` (``dom.js``) escapes what the terminal's ``printable`` escapes,
the same way, in a real browser: C0 and C1 control characters (an ESC, a NUL, a lone CR)
as well as the bidirectional overrides; newline, tab and a line-ending CR stay. And a
model's text written with an ESC and a NUL is shown escaped on the run page; a model's
text streamed in deltas is shown as ``printable`` shows the whole of it, a CR at one
delta's end and the LF at the next one's start a line ending too. The bidirectional
overrides in each place: ``tests/serve/test_console_bidi.py``.
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
from psych_runtime.workflows import (
    RunState,
    RunStatus,
    TokenDelta,
    ToolCallPiece,
    Totals,
    TurnStarted,
)
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


SPLIT_RUN = "psych-acme-visible2"
TOOL = ToolCallPiece(index=0, id="t1", name="look", arguments="{}")
SPLIT: dict[str, tuple[str | ToolCallPiece, ...]] = {
    "act-1#1": ("one\r", "\ntwo"),  # a CR LF split between two deltas
    "act-2#1": ("three\r", "four"),  # a lone CR at a delta's end, other text after it
    "act-3#1": ("five\r",),  # a lone CR at the end of all the call wrote
    "act-4#1": ("a\r", "\r", "\n", "b\r\n", "\r\n\r"),  # one after another
    "act-5#1": ("x\r", TOOL, "\ny\r"),  # a tool call's piece between the CR and the LF
}
"""Each call's deltas (text, or a tool call's piece with no text)."""
LAST = "act-6#1"


def _split_state() -> RunState:
    return _state().model_copy(update={"run_id": SPLIT_RUN})


def _delta(call: str, n: int, piece: str | ToolCallPiece) -> bytes:
    if isinstance(piece, str):
        delta = TokenDelta(call=call, turn=1, n=n, text=piece)
    else:
        delta = TokenDelta(call=call, turn=1, n=n, tool_call=piece)
    return event("delta", delta, f"2/{call}/{n}")


async def _split_stream() -> AsyncIterator[bytes]:
    yield b": connected\r\n\r\n"
    yield event("record", admitted("writer", "hi"), "1")
    yield event("record", TurnStarted(seq=2, **STAMP, turn=1), "2")
    longest = max(len(pieces) for pieces in SPLIT.values())
    for n in range(1, longest + 1):  # the calls' deltas interleaved
        for call, pieces in SPLIT.items():
            if n <= len(pieces):
                yield _delta(call, n, pieces[n - 1])
    yield _delta(LAST, 1, "done")  # shown once every delta before it is
    await asyncio.Event().wait()


async def split_state(request: Request) -> Response:
    return JSONResponse(_split_state().model_dump(mode="json"))


async def split_events(request: Request) -> Response:
    return StreamingResponse(_split_stream(), media_type="text/event-stream")


def _written(driver: Chrome, call: str) -> str | None:
    found = driver.execute_script(
        "return document.querySelector(arguments[0])?.textContent ?? null;",
        f'#inflight li[data-call="{call}"] .delta-text',
    )
    assert found is None or isinstance(found, str)
    return found


def _check_split(driver: Chrome, base: str) -> None:
    open_run(driver, base, SPLIT_RUN)
    until(driver, lambda d: _written(d, LAST) == "done")
    shown = {call: _written(driver, call) for call in SPLIT}
    whole = {
        call: "".join(p for p in pieces if isinstance(p, str)) for call, pieces in SPLIT.items()
    }
    assert shown == {call: printable(text) for call, text in whole.items()}
    assert shown["act-1#1"] == "one\r\ntwo"
    assert shown["act-2#1"] == "three\\x0dfour"
    assert shown["act-3#1"] == "five\\x0d"
    assert [e for e in browser_log(driver) if e.get("level") == "SEVERE"] == []


async def test_visible_deltas_show_a_cr_split_from_its_lf_as_printable_does(
    tmp_path: Path,
) -> None:
    require_browser()
    app = scripted_app(SPLIT_RUN, state=split_state, events=split_events)
    async with served(app) as base:
        await asyncio.to_thread(in_browser, tmp_path / "profile", lambda d: _check_split(d, base))
