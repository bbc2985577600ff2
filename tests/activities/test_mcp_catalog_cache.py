"""The MCP catalogue cache's bounds: a worker listing for many principals over its life
keeps the recent listings, the expired ones go first, and a drop stops in-flight puts."""

from __future__ import annotations

import pytest

from psych_runtime.activities.mcp._catalog import CatalogCache, Freshness, McpTool
from psych_runtime.activities.mcp._pool import SessionKey

LISTING = (McpTool(tool="lookup", description="Look up an order.", parameters={}),)
PUBLIC = Freshness(ttl_seconds=60.0, public=True)


def key(principal: str, tenant: str = "acme") -> SessionKey:
    return SessionKey(tenant, principal, "http://127.0.0.1:9/mcp", "streamable-http", None)


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr("psych_runtime.activities.mcp._catalog.time.monotonic", self)

    def __call__(self) -> float:
        return self.now


def test_past_the_bound_the_least_recently_used_listing_goes() -> None:
    cache = CatalogCache(300.0, max_listings=3)
    for name in ("a", "b", "c"):
        cache.put(key(name), LISTING, cache.generation())
    assert cache.get(key("a")) == LISTING  # now the most recent
    cache.put(key("d"), LISTING, cache.generation())
    assert len(cache) == 3
    assert cache.get(key("b")) is None
    assert [cache.get(key(name)) for name in ("a", "c", "d")] == [LISTING] * 3


def test_expired_listings_go_before_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    cache = CatalogCache(10.0, 600.0, max_listings=3)
    cache.put(key("fresh"), LISTING, cache.generation(), Freshness(600.0, public=False))
    cache.put(key("old-1"), LISTING, cache.generation())
    cache.put(key("old-2"), LISTING, cache.generation())
    clock.now += 11
    cache.put(key("new"), LISTING, cache.generation())
    assert len(cache) == 2  # both expired ones went, not the least recently used
    assert cache.get(key("fresh")) == LISTING
    assert cache.get(key("new")) == LISTING


def test_public_listings_are_bounded_in_their_own_table() -> None:
    cache = CatalogCache(300.0, max_listings=2)
    for tenant in ("t1", "t2", "t3"):
        cache.put(key("someone", tenant), LISTING, cache.generation(), PUBLIC)
    cache.put(key("own"), LISTING, cache.generation())
    assert len(cache) == 3
    assert cache.get(key("anyone", "t1")) is None
    assert cache.get(key("anyone", "t3")) == LISTING


def test_a_listing_taken_across_a_drop_is_not_kept() -> None:
    cache = CatalogCache(300.0)
    taken = cache.generation()
    cache.drop(key("someone else"))  # any key's list_changed
    cache.put(key("a"), LISTING, taken)
    assert cache.get(key("a")) is None
    cache.put(key("a"), LISTING, cache.generation())
    assert cache.get(key("a")) == LISTING


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_listings must be at least 1, not 0"):
        CatalogCache(300.0, max_listings=0)
