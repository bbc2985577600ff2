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


async def test_a_call_waiting_on_a_taken_event_leaves_none_behind() -> None:
    # A waits on E1; a consent sets it and another call takes it while A is still leaving;
    # B comes and goes with a new event E2 in that time. A, the last to leave, drops E2.
    consents = Consents(None, {})
    leaving = asyncio.Event()

    async def needs_consent() -> str:
        consents.events[key("a")].set()
        try:
            await asyncio.sleep(1)
        finally:
            await leaving.wait()  # A's cancelled work takes a while to stop
        return "never"

    first = asyncio.ensure_future(consents.unless_needed(key("a"), needs_consent()))
    await asyncio.sleep(0.01)  # A saw the consent and is cancelling its work
    consents.take(key("a"))
    assert await consents.unless_needed(key("a"), answer("ok")) == "ok"  # B, with E2
    leaving.set()
    with pytest.raises(ConsentInterrupted):
        await first
    assert consents.events == {}
