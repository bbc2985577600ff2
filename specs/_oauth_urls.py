"""The URLs of an MCP server's OAuth client, checked at publish: what the SDK or the
authorization server would refuse at run time, named before a Run meets it."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from psych_runtime.specs._models import McpOAuth
from psych_runtime.specs._problem import Problem


def oauth_url_problems(oauth: McpOAuth, path: str) -> list[Problem]:
    """Problems of ``oauth``'s ``cimd_url`` and ``redirect_uris`` (reported under ``path``,
    the server's ``oauth``).

    A client-id metadata document URL is the client id itself: an https URL with a host
    and a path (the draft says so, and the SDK refuses any other when a Run connects). A
    redirect URI is where psych's OAuth callback listens: an absolute http(s) URL with a
    host, and no fragment (RFC 6749 section 3.1.2).
    """
    problems = []
    if oauth.cimd_url is not None:
        parts = _split(oauth.cimd_url)
        if (
            parts is None
            or parts.scheme != "https"
            or not parts.hostname
            or parts.path in ("", "/")
        ):
            problems.append(
                Problem(
                    f"{path}.cimd_url",
                    "a client-id metadata document URL is the client id: an https URL with a "
                    "host and a path (https://app.example.com/oauth/client.json), not "
                    f"{oauth.cimd_url!r}",
                )
            )
    for index, uri in enumerate(oauth.redirect_uris):
        parts = _split(uri)
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            wrong = "an absolute http(s) URL with a host"
        elif parts.fragment or uri.endswith("#"):
            wrong = "a URL without a fragment (#...)"
        else:
            continue
        problems.append(
            Problem(
                f"{path}.redirect_uris[{index}]",
                f"a redirect URI is {wrong}, where psych's OAuth callback listens "
                f"(https://psych.example.com/oauth/callback), not {uri!r}",
            )
        )
    return problems


def _split(url: str) -> SplitResult | None:
    """``url``'s parts, or None when it is no URL (a malformed host or port)."""
    try:
        parts = urlsplit(url)
        _ = parts.hostname, parts.port
    except ValueError:
        return None
    return parts
