"""How long a response made for a caller lasts: an event stream ends when the credential it
was opened with stops being accepted (``Caller.expires_at``), so a revoked caller's expired
token does not keep reading a Run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import TypeVar

from psych_runtime.workers.serve._auth import Unauthorized

T = TypeVar("T")


class CredentialExpired(Unauthorized):
    """The credential a stream was opened with is no longer accepted: the stream ends."""

    def __init__(self, expires_at: float) -> None:
        super().__init__("the token this stream was opened with has expired")
        self.expires_at = expires_at
        """When it stopped being accepted (``Caller.expires_at``)."""


async def until_expiry(
    items: AsyncGenerator[T, None], expires_at: float | None
) -> AsyncGenerator[T, None]:
    """``items``, for as long as the caller's credential is accepted (``expires_at``,
    ``Caller.expires_at``; None: for good). Only each wait for the next item is bounded,
    never what the consumer does with one: a deadline there would cancel a send half done.
    ``items`` is closed when this ends or is closed.

    Raises:
        CredentialExpired: the credential expired while an item was awaited.
    """
    deadline = None
    if expires_at is not None:
        # The wall clock's moment on the loop's clock, which the timeout runs on.
        deadline = asyncio.get_running_loop().time() + (expires_at - time.time())
    try:
        while True:
            bound = asyncio.timeout_at(deadline)
            try:
                async with bound:
                    item = await anext(items)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if expires_at is None or not bound.expired():
                    raise
                raise CredentialExpired(expires_at) from None
            yield item
    finally:
        await items.aclose()
