"""``psych serve`` answers the OAuth redirect of MCP servers a person consents to at
``/oauth/callback`` when it has the workers' token store (and not without one): a
redirect whose state no Run waits on, or that carries the authorization server's refusal,
is answered 400 naming what is wrong, and nothing reaches Temporal."""

from __future__ import annotations

from pathlib import Path

from psych_runtime.activities.tokens import LocalTokenStore

from ._app import api


async def test_the_callback_is_mounted_with_a_token_store(tmp_path: Path) -> None:
    async with api(tmp_path, tokens=LocalTokenStore(tmp_path / "tokens")) as http:
        unknown = await http.get("/oauth/callback", params={"code": "c", "state": "nobody"})
        assert unknown.status_code == 400
        assert "no authorization waits on this state" in unknown.text
        assert unknown.headers["cache-control"] == "no-store"
        refused = await http.get("/oauth/callback", params={"error": "access_denied", "state": "s"})
        assert refused.status_code == 400
        assert "the authorization server refused: access_denied" in refused.text
        bare = await http.get("/oauth/callback")
        assert "the redirect carries no code or no state" in bare.text


async def test_without_a_token_store_there_is_no_callback(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        assert (await http.get("/oauth/callback", params={"state": "s"})).status_code == 404
