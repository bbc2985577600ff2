"""An A2A peer's URL, checked at publish: the peer's base URL, http or https with a host,
under which its Agent Card is read (A2A's well-known path), never the card's own URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from psych_runtime.specs._problem import Problem

CARD_PATH = "/.well-known/agent-card.json"
"""Where a peer's Agent Card is, under its URL."""


def peer_url_problems(url: str, path: str) -> list[Problem]:
    """What keeps a card from being read under ``url`` (reported at ``path``)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return []  # not a URL at all: ``url_credentials`` names it
    if parts.scheme not in ("http", "https") or not host:
        return [
            Problem(
                path,
                "an http(s) URL with a host (the peer's base URL: its card is read at "
                f"<url>{CARD_PATH}), not {url!r}",
            )
        ]
    if parts.path.rstrip("/").endswith(CARD_PATH):
        base = url[: url.index(CARD_PATH)]
        return [
            Problem(
                path,
                f"names the peer's card, not the peer: give the peer's base URL ({base}); "
                f"its card is read at <url>{CARD_PATH}, not {url!r}",
            )
        ]
    return []
