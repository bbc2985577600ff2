"""Credentials written into a Spec as literals, where the credential mechanism belongs.

A Spec is stored whole in its Version, in every Run's history and in records, so a
secret written into it is a secret stored in all of those. Credentials are names
(``HttpTool.credential``, ``McpServer.credential``, ``A2APeer.credential``) that the
SecretResolver turns into values at call time. These checks find the literal ways
people write them instead: ``user:password@`` in a URL, a key or token as a query
parameter, and key- or token-carrying headers (the model refuses ``Authorization``,
``Cookie`` and ``Proxy-Authorization`` outright; these are their look-alikes).

The name lists are heuristics: a false alarm costs a rename, a miss stores a secret.
Names are compared lowercased with everything but letters and digits removed, so
``X-Api-Key``, ``x_api_key`` and ``XApiKey`` are one name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlsplit

from psych_runtime.specs._problem import Problem

_SECRET_QUERY_NAMES = frozenset(
    {
        "accesskey",
        "accesstoken",
        "apikey",
        "apisecret",
        "apitoken",
        "auth",
        "authorization",
        "authtoken",
        "bearertoken",
        "clientsecret",
        "credential",
        "credentials",
        "idtoken",
        "key",
        "pass",
        "passwd",
        "password",
        "privatekey",
        "pwd",
        "refreshtoken",
        "secret",
        "secretkey",
        "sessionid",
        "sessiontoken",
        "sig",
        "signature",
        "token",
        "xapikey",
    }
)
"""Query parameter names that carry a credential."""

_SECRET_SUFFIXES = (
    "accesskey",
    "accesstoken",
    "apikey",
    "apitoken",
    "authtoken",
    "passwd",
    "password",
    "privatekey",
    "secret",
    "secretkey",
)
"""Endings that make any name a credential's (``client_secret``, ``stripe_api_key``)."""

_SECRET_HEADER_PARTS = (
    "apikey",
    "auth",
    "cookie",
    "credential",
    "passwd",
    "password",
    "secret",
    "session",
    "signature",
    "token",
)
"""A header whose name contains one of these carries a credential (``X-Auth-Token``)."""

_SECRET_HEADER_SUFFIXES = (
    "accesskey",
    "functionskey",
    "masterkey",
    "privatekey",
    "secretkey",
    "subscriptionkey",
)
"""Key headers named by vendors; a bare ``*-Key`` (``Idempotency-Key``) is not one."""

_AUTH_SCHEME_VALUE = re.compile(r"^\s*(bearer|basic|digest|token)\s+\S", re.IGNORECASE)
"""A header value that is an Authorization value, whatever the header is called."""

_PLACEHOLDER_ONLY = re.compile(r"^\{[^{}]+\}$")

_USE_CREDENTIAL = (
    "name a credential instead (`credential`), which the SecretResolver resolves at call "
    "time; a literal is stored in the Version, in history and in records"
)


def _normal(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _secret_query_name(name: str) -> bool:
    normal = _normal(name)
    return normal in _SECRET_QUERY_NAMES or normal.endswith(_SECRET_SUFFIXES)


def _secret_header_name(name: str) -> bool:
    normal = _normal(name)
    return (
        normal in ("key", "xkey")
        or any(part in normal for part in _SECRET_HEADER_PARTS)
        or normal.endswith(_SECRET_HEADER_SUFFIXES)
    )


def url_credentials(url: str, path: str) -> list[Problem]:
    """Credentials written into ``url``: userinfo, or a literal key-like query parameter.

    A query value that is one ``{placeholder}`` is filled from the call's arguments and
    is not a literal, so it passes.
    """
    try:
        parts = urlsplit(url)
    except ValueError as err:
        return [Problem(path, f"not a URL: {err}")]
    problems = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at and userinfo:
        shape = "user:password@" if ":" in userinfo else "user@"
        problems.append(Problem(path, f"credentials in the URL ({shape}): {_USE_CREDENTIAL}"))
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if value and not _PLACEHOLDER_ONLY.match(value) and _secret_query_name(name):
            problems.append(
                Problem(path, f"literal credential in query parameter {name!r}: {_USE_CREDENTIAL}")
            )
    return problems


def header_credentials(headers: Mapping[str, str], path: str) -> list[Problem]:
    """Literal headers that carry a credential, by their name or by their value."""
    problems = []
    for name in sorted(headers):
        value = headers[name]
        if value and (_secret_header_name(name) or _AUTH_SCHEME_VALUE.match(value)):
            problems.append(
                Problem(f"{path}[{name}]", f"literal credential header: {_USE_CREDENTIAL}")
            )
    return problems
