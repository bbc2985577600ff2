"""What a lease of a pooled MCP session (``_pool.py``) was told of its own requests.

The SDK sends each request in the context of the task that asked for it, so a failure the
session is told of (``ToldAuth``, the egress port's refusal of a reply) is also told to
the lease whose request it was (``TOLD``). On an SSE session such a request is never
answered (the SDK's writer task ends with the POST that failed): the pool then marks the
lease's ``Told`` unanswerable, and ``unless_told`` stops the lease's wait at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

from psych_runtime.activities.mcp._told import OAuthFailed, TokenRefused
from psych_runtime.activities.mcp._until import until_set
from psych_runtime.specs import StoreUnavailable

T = TypeVar("T")


class Told(list[Exception]):
    """What was told (the session's ``refused``) for the requests of one lease."""

    def __init__(self) -> None:
        super().__init__()
        self.unanswered = asyncio.Event()
        """Set when one of them will never be answered (``unanswerable``)."""
        self.failure: Exception | None = None
        """What the lease raises then."""

    def unanswerable(self, failure: Exception) -> None:
        """A request of the lease will never be answered; the lease raises ``failure``."""
        self.failure = failure
        self.unanswered.set()


TOLD: ContextVar[Told | None] = ContextVar("psych_mcp_lease_told", default=None)
"""What was told for the requests of the lease in whose context they ran."""


async def unless_told(work: Awaitable[T]) -> T:
    """``work`` (requests on the session leased in this context), unless a request of the
    lease is found never to be answered first: ``work`` is then cancelled and the lease's
    ``failure`` raised. ``work`` that had its answer keeps it. Outside a lease: ``work``."""
    told = TOLD.get()
    if told is None:
        return await work
    task = await until_set(work, told.unanswered)
    answered = not task.cancelled() and task.exception() is None
    if answered or told.failure is None:
        return task.result()
    raise told.failure


def token_refused(told: list[Exception], refused: list[Exception]) -> TokenRefused | None:
    """The MCP server's refusal of a just-obtained token ``told`` a lease, taken out of the
    session's ``refused``: the session goes on, and a later end of it must not be blamed
    on this."""
    for found in reversed(told):
        if isinstance(found, TokenRefused):
            if found in refused:
                refused.remove(found)
            return found
    return None


def store_down(told: list[Exception]) -> StoreUnavailable | None:
    """The token store's failure (``ToldAuth``), when it is the last ``told``."""
    last = told[-1] if told else None
    return last if isinstance(last, StoreUnavailable) else None


def flow_unsent(told: list[Exception], said: str) -> bool:
    """Whether the error saying ``said`` is of a request whose OAuth flow failed before it
    sent the request (``OAuthFailed.unsent``), the last ``told``: the request never left
    (``_posts.OnePostFails`` answers it with what was told)."""
    last = told[-1] if told else None
    return isinstance(last, OAuthFailed) and last.unsent and said == str(last)
