"""The threads sync Python hooks run on: their own, not the event loop's shared ones.

A sync hook past its deadline keeps its thread (a thread cannot be stopped). On the loop's
default executor, which sync code tools and the token and version stores use too, enough
stuck hooks (a network call without a timeout) would leave none of its threads free and
stall every such call of the worker. Here each sync hook gets a daemon thread of its own
(a stuck one holds up neither other calls nor the worker's exit), at most
``SYNC_HOOK_THREADS`` at once: past that, a hook fails at once, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

SYNC_HOOK_THREADS = 32
"""How many sync hooks may run at once on a worker (stuck ones included)."""

_slots = threading.BoundedSemaphore(SYNC_HOOK_THREADS)


async def run_sync_hook(action: Callable[..., Any], *args: Any) -> Any:
    """``action(*args)`` on a thread of its own, with the caller's context (the running
    activity's, as ``asyncio.to_thread`` gives).

    Raises:
        RuntimeError: ``SYNC_HOOK_THREADS`` sync hooks are running already.
    """
    if not _slots.acquire(blocking=False):
        raise RuntimeError(
            f"all {SYNC_HOOK_THREADS} threads for sync hooks are taken (by hooks that have "
            "not returned, past their deadline or not)"
        )
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
            _slots.release()
        # RuntimeError: the loop has closed; nobody waits for this answer any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="psych-hook", daemon=True).start()
    return await answer
