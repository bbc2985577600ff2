"""``McpSettings`` refuses a value out of its range, naming the field, as ``A2aSettings``
does: a worker built with one would otherwise misbehave silently (a pool of no sessions
closes each after its use, so no ``tools/list_changed`` is ever heard; no list pages makes
every server unavailable; a negative timeout fails every call)."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.activities.mcp import McpSettings


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("call_timeout_seconds", 0, "more than 0"),
        ("call_timeout_seconds", -1.0, "more than 0"),
        ("connect_timeout_seconds", 0.0, "more than 0"),
        ("list_timeout_seconds", -5, "more than 0"),
        ("idle_seconds", 0, "more than 0"),
        ("heartbeat_seconds", 0, "more than 0"),
        ("max_sessions", 0, "more than 0"),
        ("max_list_pages", 0, "more than 0"),
        ("max_sessions", 2.5, "a whole number"),
        ("max_list_pages", True, "a whole number"),
        ("preload_budget_chars", -1, "0 or more"),
        ("catalog_ttl_seconds", -1, "0 or more"),
        ("catalog_max_ttl_seconds", -0.5, "0 or more"),
        ("call_timeout_seconds", "120", "a number"),
        ("catalog_ttl_seconds", float("nan"), "a number"),
    ],
)
def test_a_setting_out_of_range_is_refused_naming_it(field: str, value: Any, said: str) -> None:
    with pytest.raises(ValueError, match=rf"^McpSettings\.{field}: {said}, not "):
        McpSettings(**{field: value})


def test_an_issuer_that_is_not_an_http_url_is_refused_naming_its_credential() -> None:
    with pytest.raises(
        ValueError,
        match=r"^McpSettings\.oauth_issuers\['crm_secret'\]: an http\(s\) URL with a host, "
        r"not 'auth\.example\.com'$",
    ):
        McpSettings(oauth_issuers={"crm_secret": "auth.example.com"})


def test_the_defaults_and_the_documented_zeros_are_accepted() -> None:
    McpSettings()
    McpSettings(catalog_ttl_seconds=0, catalog_max_ttl_seconds=0, preload_budget_chars=0)
    McpSettings(oauth_issuers={"crm_secret": "https://auth.example.com/tenant"})
