"""An MCP server's endpoint URL as a Spec names it: the runtime reaches MCP servers over
streamable HTTP or SSE only, so the URL must be an absolute ``http``/``https`` one with a
host (a stdio server's command line, a ``ws://`` or a relative URL is never reachable)."""

from __future__ import annotations

from urllib.parse import urlsplit

from psych_runtime.specs._problem import Problem


def endpoint_problems(url: str, path: str) -> list[Problem]:
    """Why ``url`` cannot be an MCP server's endpoint, at ``path`` (empty: it can)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError as err:
        return [Problem(path, f"{url!r} is not a URL: {err}")]
    if parts.scheme.lower() in ("http", "https") and host and url == url.strip():
        return []
    return [
        Problem(
            path,
            f"{url!r} is not an http:// or https:// URL with a host: MCP servers are reached "
            "over streamable HTTP or SSE only",
        )
    ]
