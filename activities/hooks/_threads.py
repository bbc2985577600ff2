"""The threads sync Python hooks run on: their own, not the event loop's shared ones.

A sync hook past its deadline keeps its thread (a thread cannot be stopped). On the loop's
default executor, which sync code tools and the token and version stores use too, enough
stuck hooks (a network call without a timeout) would leave none of its threads free and
stall every such call of the worker. Here each sync hook gets a daemon thread of its own
(a stuck one holds up neither other calls nor the worker's exit), at most
``SYNC_HOOK_THREADS`` at once: past that, a hook waits for a thread to free, within its
own deadline (the caller's). Until 12-06 it failed at once, so a pre hook that was merely
busy denied its call whenever more than 32 calls of the worker ran one (a review).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

SYNC_HOOK_THREADS = 32
"""How many sync hooks may run at once on a worker (stuck ones included)."""

_lock = threading.Lock()
_free = SYNC_HOOK_THREADS
"""Threads free to take (under ``_lock``)."""
_waiting: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
"""Hooks waiting for a thread, first come first served (under ``_lock``)."""


class Start:
    """Whether a sync hook got its thread (``started``): one still waiting for a thread
    when its deadline passes never ran, which its failure says."""

    started = False


async def run_sync_hook(action: Callable[..., Any], *args: Any, start: Start | None = None) -> Any:
    """``action(*args)`` on a thread of its own, with the caller's context (the running
    activity's, as ``asyncio.to_thread`` gives); while ``SYNC_HOOK_THREADS`` sync hooks run
    already, it first waits for one of them to return (the caller's deadline bounds it)."""
    await _take()
    if start is not None:
        start.started = True
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if answer.done():  # the caller stopped waiting (its deadline, a cancellation)
            return
        if error is None:
            answer.set_result(result)
        else:
            answer.set_exception(error)

    def work() -> None:
        try:
            result, error = context.run(action, *args), None
        except BaseException as err:  # handed to the caller, who decides
            result, error = None, err
        finally:
            _give()
        # RuntimeError: the loop has closed; nobody waits for this answer any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, error)

    try:
        threading.Thread(target=work, name="psych-hook", daemon=True).start()
    except BaseException:  # no thread (RuntimeError: the system has none left): no slot
        _give()
        raise
    return await answer


async def _take() -> None:
    """Take a thread, waiting for one to be given back while none is free."""
    global _free
    loop = asyncio.get_running_loop()
    with _lock:
        if _free:
            _free -= 1
            return
        turn: asyncio.Future[None] = loop.create_future()
        _waiting.append((loop, turn))
    try:
        await turn
    except asyncio.CancelledError:  # its deadline passed, or its call was cancelled
        with _lock:
            if (loop, turn) in _waiting:
                _waiting.remove((loop, turn))
                raise
        if turn.done() and not turn.cancelled():
            _give()  # handed a thread it will not use: the next hook's
        raise  # else one being handed to it goes on (``_hand``)


def _give() -> None:
    """Give a thread back: to the first hook waiting for one, else to the free ones."""
    global _free
    with _lock:
        while _waiting:
            loop, turn = _waiting.popleft()
            # RuntimeError: its loop has closed; nobody waits there any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_hand, turn)
                return
        _free += 1


def _hand(turn: asyncio.Future[None]) -> None:
    """On the waiting hook's loop: wake it, or, when it stopped waiting, give the thread
    on."""
    if turn.done():
        _give()
    else:
        turn.set_result(None)
