"""An MCP server's OAuth settings, checked at publish: its client's URLs and identity, what
the SDK or the authorization server would refuse at run time, named before a Run meets it."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from psych_runtime.specs._credentials import url_credentials
from psych_runtime.specs._models import McpOAuth, McpServer
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


def oauth_problems(server: McpServer, path: str) -> list[Problem]:
    """Problems of ``server``'s ``oauth`` (``server`` at ``path``): its URLs
    (``oauth_url_problems``, literal credentials), a bearer credential beside it, and a
    grant without the client identity it needs."""
    oauth = server.oauth
    assert oauth is not None
    problems = []
    if oauth.cimd_url is not None:
        problems += url_credentials(oauth.cimd_url, f"{path}.oauth.cimd_url")
    problems += oauth_url_problems(oauth, f"{path}.oauth")
    if server.credential is not None:
        problems.append(
            Problem(
                f"{path}.credential",
                "a server takes either a bearer credential or oauth, not both "
                "(OAuth sends the token it obtains)",
            )
        )
    if oauth.grant == "client_credentials":
        for field in ("preregistered_client_id", "client_secret_credential"):
            if getattr(oauth, field) is None:
                problems.append(
                    Problem(
                        f"{path}.oauth.{field}",
                        "the client_credentials grant needs the client id the authorization "
                        "server registered and the name of the credential holding its secret",
                    )
                )
    else:
        if oauth.preregistered_client_id is None and oauth.cimd_url is None:
            if not oauth.allow_dynamic_registration:
                problems.append(
                    Problem(
                        f"{path}.oauth.preregistered_client_id",
                        "the authorization_code grant needs a client: preregistered_client_id, "
                        "or cimd_url (a client-id metadata document), or "
                        "allow_dynamic_registration: true (a client registered with the "
                        "authorization server at run time); allow_dynamic_registration is false",
                    )
                )
            elif oauth.client_secret_credential is not None:
                problems.append(
                    Problem(
                        f"{path}.oauth.client_secret_credential",
                        "a client secret belongs to preregistered_client_id, which is not set: "
                        "a dynamically registered client gets its own from the registration",
                    )
                )
        if not oauth.redirect_uris:
            problems.append(
                Problem(
                    f"{path}.oauth.redirect_uris",
                    "the authorization_code grant needs a redirect URI: where the operator's "
                    "OAuth callback listens (psych oauth-callback, psych serve /oauth/callback)",
                )
            )
        for index, uri in enumerate(oauth.redirect_uris):
            problems += url_credentials(uri, f"{path}.oauth.redirect_uris[{index}]")
    return problems
