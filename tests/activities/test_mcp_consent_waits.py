"""A call's wait for consent (``Consents.unless_needed``) keeps nothing per key once the
calls of that key are done, unless a consent is needed and its flow not yet taken."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.activities.mcp._consent import ConsentInterrupted, Consents
from psych_runtime.activities.tokens import TokenKey


def key(principal: str) -> TokenKey:
    return TokenKey("acme", principal, "http://127.0.0.1:9", "psych", "http://127.0.0.1:9/mcp")


async def answer(value: str, delay: float = 0.0) -> str:
    await asyncio.sleep(delay)
    return value


async def test_calls_of_many_keys_leave_no_event_behind() -> None:
    consents = Consents(None, {})
    for n in range(50):
        assert await consents.unless_needed(key(f"user-{n}"), answer("ok")) == "ok"
    assert consents.events == {}


async def test_the_event_stays_while_another_call_of_the_key_waits() -> None:
    consents = Consents(None, {})
    slow = asyncio.ensure_future(consents.unless_needed(key("a"), answer("slow", 0.05)))
    assert await consents.unless_needed(key("a"), answer("fast")) == "fast"
    assert key("a") in consents.events
    assert await slow == "slow"
    assert consents.events == {}


async def test_a_consent_needed_midway_interrupts_and_is_kept_for_take() -> None:
    consents = Consents(None, {})

    async def needs_consent() -> str:
        consents.events[key("a")].set()  # what `saw` does when the provider meets it
        await asyncio.sleep(1)
        return "never"

    with pytest.raises(ConsentInterrupted):
        await consents.unless_needed(key("a"), needs_consent())
    assert consents.events[key("a")].is_set()
    assert consents.take(key("a")) is None  # no flow was kept in this test
    assert consents.events == {}
