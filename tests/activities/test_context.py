"""The context providers' budgeting (activities/model/_context.py), with a real BlobStore."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from psych_runtime.activities import (
    ContextProviders,
    ContextRequest,
    ContextSettings,
    ContextSource,
    estimate_tokens,
)
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.specs import Scope

REQUEST = ContextRequest(Scope(tenant="acme"), "r1", 1, ())


def gives(text: object) -> ContextSource:
    async def provider(request: ContextRequest) -> str | None:
        return text  # type: ignore[return-value]  # a provider breaking its contract

    return ContextSource(f"p{id(provider)}", provider)


def named(name: str, text: str, priority: int = 0, **kw: int) -> ContextSource:
    async def provider(request: ContextRequest) -> str:
        return text

    return ContextSource(name, provider, priority=priority, **kw)


def test_the_estimate_is_characters_over_four_rounded_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


async def test_lowest_priority_dropped_first_ties_by_registration(tmp_path: Path) -> None:
    sources = (
        named("a", "a" * 40, priority=1),  # 10 tokens
        named("b", "b" * 40, priority=1),
        named("c", "c" * 40, priority=3),
        named("d", "d" * 40, priority=2),
    )
    blobs = LocalBlobStore(tmp_path)
    texts, turn = await ContextProviders(ContextSettings(sources, budget_tokens=25), blobs).gather(
        REQUEST
    )
    assert turn is not None
    assert [s.provider for s in turn.shown] == ["c", "d"]
    assert texts == ["c" * 40, "d" * 40]
    assert [(s.provider, s.reason, s.tokens) for s in turn.skipped] == [
        ("a", "over_budget", 10),
        ("b", "over_budget", 10),
    ]


async def test_a_block_too_big_for_the_budget_does_not_push_out_one_that_fits(
    tmp_path: Path,
) -> None:
    sources = (
        named("low", "l" * 400, priority=0),  # 100 tokens
        named("high", "h" * 12000, priority=5),  # 3000 tokens: over the whole budget
    )
    texts, turn = await ContextProviders(
        ContextSettings(sources, budget_tokens=2000), LocalBlobStore(tmp_path)
    ).gather(REQUEST)
    assert turn is not None
    assert texts == ["l" * 400]
    assert [(s.provider, s.tokens) for s in turn.shown] == [("low", 100)]
    assert [(s.provider, s.reason, s.tokens, s.detail) for s in turn.skipped] == [
        (
            "high",
            "over_budget",
            3000,
            "3000 tokens did not fit the 2000 left of the 2000-token budget",
        )
    ]


async def test_a_block_over_its_cap_is_cut_and_empty_answers_show_nothing(tmp_path: Path) -> None:
    sources = (named("long", "z" * 100, max_tokens=5), named("empty", ""))
    texts, turn = await ContextProviders(ContextSettings(sources), LocalBlobStore(tmp_path)).gather(
        REQUEST
    )
    assert turn is not None
    assert texts == ["z" * 20]
    assert [(s.provider, s.tokens, s.truncated) for s in turn.shown] == [("long", 5, True)]
    assert turn.skipped == ()


async def test_failing_slow_and_non_text_providers_are_skipped(tmp_path: Path) -> None:
    async def broken(request: ContextRequest) -> str:
        raise ValueError("no")

    async def slow(request: ContextRequest) -> str:
        await asyncio.sleep(5)
        return "late"

    sources = (
        ContextSource("broken", broken),
        ContextSource("slow", slow, timeout_seconds=0.05),
        ContextSource("number", gives(42).provider),
    )
    texts, turn = await ContextProviders(ContextSettings(sources), LocalBlobStore(tmp_path)).gather(
        REQUEST
    )
    assert turn is not None
    assert texts == []
    assert [(s.provider, s.reason) for s in turn.skipped] == [
        ("broken", "failed"),
        ("slow", "timeout"),
        ("number", "failed"),
    ]
    assert turn.skipped[2].detail == "returned int, not text"


def test_bad_registrations_are_refused() -> None:
    with pytest.raises(ValueError, match="registered twice: a"):
        ContextSettings((named("a", "x"), named("a", "y")))
    with pytest.raises(ValueError, match="max_tokens must be > 0"):
        named("a", "x", max_tokens=0)
    with pytest.raises(ValueError, match="budget_tokens must be > 0"):
        ContextSettings(budget_tokens=0)


async def test_a_failure_detail_has_its_control_characters_escaped(tmp_path: Path) -> None:
    async def hostile(request: ContextRequest) -> str:
        raise ValueError("crm said \x1b]8;;https://evil.test\x07here\x1b]8;;\x07")

    _, turn = await ContextProviders(
        ContextSettings((ContextSource("crm", hostile),)), LocalBlobStore(tmp_path)
    ).gather(REQUEST)
    assert turn is not None
    assert turn.skipped[0].detail == (
        "ValueError: crm said \\x1b]8;;https://evil.test\\x07here\\x1b]8;;\\x07"
    )


async def test_a_failure_detail_is_one_line_and_shows_no_bidi_override(tmp_path: Path) -> None:
    # specs.printable's escapes (the bidi overrides were let through), and the line breaks
    # and tab it keeps escaped as before: the detail is one line.
    async def hostile(request: ContextRequest) -> str:
        raise ValueError("crm said\r\n\tpaid \u202eten\u202c")

    _, turn = await ContextProviders(
        ContextSettings((ContextSource("crm", hostile),)), LocalBlobStore(tmp_path)
    ).gather(REQUEST)
    assert turn is not None
    assert turn.skipped[0].detail == "ValueError: crm said\\x0d\\x0a\\x09paid \\u202eten\\u202c"


async def test_a_providers_own_timeout_error_is_a_failure_not_our_timeout(tmp_path: Path) -> None:
    async def gives_up(request: ContextRequest) -> str:
        raise TimeoutError("crm read timed out")

    async def slow(request: ContextRequest) -> str:
        await asyncio.sleep(5)
        return "late"

    sources = (ContextSource("crm", gives_up), ContextSource("slow", slow, timeout_seconds=0.05))
    _, turn = await ContextProviders(ContextSettings(sources), LocalBlobStore(tmp_path)).gather(
        REQUEST
    )
    assert turn is not None
    assert [(s.provider, s.reason, s.detail) for s in turn.skipped] == [
        ("crm", "failed", "TimeoutError: crm read timed out"),
        ("slow", "timeout", "no answer within 0.05 s"),
    ]


async def test_a_providers_own_cancelled_error_is_a_failure(tmp_path: Path) -> None:
    async def awaits_a_cancelled_task(request: ContextRequest) -> str:
        lookup = asyncio.ensure_future(asyncio.Event().wait())
        lookup.cancel()
        await lookup
        return "never"

    sources = (ContextSource("crm", awaits_a_cancelled_task), named("policy", "Refunds: 30 days."))
    texts, turn = await ContextProviders(ContextSettings(sources), LocalBlobStore(tmp_path)).gather(
        REQUEST
    )
    assert texts == ["Refunds: 30 days."]
    assert turn is not None
    assert [(s.provider, s.reason, s.detail) for s in turn.skipped] == [
        ("crm", "failed", "CancelledError: ")
    ]


async def test_a_cancelled_call_still_cancels_its_providers(tmp_path: Path) -> None:
    asked = asyncio.Event()

    async def waits(request: ContextRequest) -> str:
        asked.set()
        await asyncio.Event().wait()
        return "never"

    settings = ContextSettings((ContextSource("crm", waits, timeout_seconds=3600),))
    gathering = asyncio.ensure_future(
        ContextProviders(settings, LocalBlobStore(tmp_path)).gather(REQUEST)
    )
    await asked.wait()
    gathering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathering


async def test_providers_that_all_give_nothing_record_nothing(tmp_path: Path) -> None:
    # Nothing shown and nothing skipped: the call's result carries no context, as without
    # providers, rather than an empty ContextTurn recorded for every turn.
    sources = (named("empty", ""), ContextSource("none", gives(None).provider))
    texts, turn = await ContextProviders(ContextSettings(sources), LocalBlobStore(tmp_path)).gather(
        REQUEST
    )
    assert (texts, turn) == ([], None)
