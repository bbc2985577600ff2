"""How a worker talks to MCP servers (its own module: ``WorkerSettings`` holds one, and
importing the MCP activities loads the ``mcp`` SDK, which every ``psych`` command would
then pay for)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

from psych_runtime.specs import SpecError


@dataclass(frozen=True)
class McpSettings:
    """How a worker talks to MCP servers. Every field has a documented default.

    Raises:
        ValueError: a field out of its range, or an issuer that is not an http(s) URL (the
            message names the field).

    Attributes:
        call_timeout_seconds: longest one ``tools/call`` may take; past it the call is
            cancelled (the server is told) and the model reads an error. Default 120.
        catalog_ttl_seconds: how long a session's tool listing is served from the
            worker's cache (dropped sooner on ``tools/list_changed``; 0: never cached).
            Default 300. A server of the 2026-07-28 protocol says how long its listing
            stays fresh (``ttlMs``): that is honoured instead, shorter or longer, up to
            ``catalog_max_ttl_seconds`` (0 here still turns the cache off).
        catalog_max_ttl_seconds: the longest a server's own ``ttlMs`` keeps a listing in
            the cache. Default 3600.
        preload_budget_chars: a server whose narrowed definitions take more characters
            of JSON than this is deferred when its ``preload`` is None. Default 16 000
            (about 4 000 tokens: a dozen richly described tools).
        max_sessions: most MCP sessions a worker keeps open (idle ones past it are closed,
            least recently used first). Default 64.
        idle_seconds: a session unused this long is closed. Default 300.
        connect_timeout_seconds: bound on connecting plus ``initialize``. Default 8 (a
            server behind a proxy that starts it on first connection needs a few).
        list_timeout_seconds: bound on all ``tools/list`` pages of one server. Default 10;
            with the connect bound, one turn's catalogue takes at most 18 s whatever the
            servers do (they are asked concurrently), after the tenant permits port's
            answer (at most 20 s, ``PERMITS_ANSWER_SECONDS``).
        max_list_pages: most ``tools/list`` pages read from one server (a server whose
            cursor never ends is unavailable, not a hang). Default 100.
        heartbeat_seconds: how often a running call heartbeats (also on every progress
            notification). Default 1.
        oauth_issuers: client secret credential name -> the issuer URL of the
            authorization server that secret belongs to (``PSYCH_MCP_OAUTH_ISSUERS``:
            ``name=https://issuer,...``, or ``{"name": "https://issuer", ...}`` for names
            holding a comma). A server with ``oauth`` (client_credentials)
            whose ``client_secret_credential`` has no issuer here is unavailable: the
            secret is sent to that issuer's token endpoint only, whatever server the MCP
            server points at. An ``authorization_code`` public client is named by its
            client id (or ``cimd_url``); one registered dynamically by the MCP server's
            URL. Default none.
    """

    call_timeout_seconds: float = 120.0
    catalog_ttl_seconds: float = 300.0
    catalog_max_ttl_seconds: float = 3600.0
    preload_budget_chars: int = 16_000
    max_sessions: int = 64
    idle_seconds: float = 300.0
    connect_timeout_seconds: float = 8.0
    list_timeout_seconds: float = 10.0
    max_list_pages: int = 100
    heartbeat_seconds: float = 1.0
    oauth_issuers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for item in fields(self):
            if item.name == "oauth_issuers":
                continue
            value = getattr(self, item.name)
            where = f"McpSettings.{item.name}"
            if item.name in _WHOLE and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{where}: a whole number, not {value!r}")
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise ValueError(f"{where}: a number, not {value!r}")
            if item.name in _AT_LEAST_ZERO and value < 0:
                raise ValueError(f"{where}: 0 or more, not {value!r}")
            if item.name not in _AT_LEAST_ZERO and value <= 0:
                raise ValueError(f"{where}: more than 0, not {value!r}")
        for name, issuer in self.oauth_issuers.items():
            parts = urlsplit(issuer) if isinstance(issuer, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"McpSettings.oauth_issuers[{name!r}]: an http(s) URL with a host, "
                    f"not {issuer!r}"
                )


_WHOLE = frozenset({"preload_budget_chars", "max_sessions", "max_list_pages"})
"""Fields that count things."""
_AT_LEAST_ZERO = frozenset(
    {"catalog_ttl_seconds", "catalog_max_ttl_seconds", "preload_budget_chars"}
)
"""Fields whose 0 means something (never cached; every server with tools deferred)."""


_ISSUER_START = re.compile(r"=https?://", re.IGNORECASE)
"""Where an entry's issuer starts (its last such place)."""

_COMMA = (
    "entries are separated by commas: a name holding a comma is written in the JSON form, "
    'PSYCH_MCP_OAUTH_ISSUERS=\'{"<name>": "<issuer URL>", ...}\''
)
"""What a comma-separated entry's error adds: it may be a piece of a name cut at a comma."""


def parse_oauth_issuers(text: str) -> dict[str, str]:
    """``PSYCH_MCP_OAUTH_ISSUERS``: ``name=https://issuer`` pairs, comma-separated (a name
    with ``=`` of its own, an MCP server URL's query, ends at the last ``=http(s)://``);
    or, when it starts with ``{``, a JSON object of name to issuer URL, for names holding
    a comma (credential names, client ids and MCP server URLs may).

    Raises:
        SpecError: a pair without ``=``, an empty name, a name given twice, an issuer that
            is not an http(s) URL or has a query or fragment (each named), or JSON that
            does not parse as an object of strings.
    """
    if text.strip().startswith("{"):
        return _parse_json(text)
    issuers: dict[str, str] = {}
    for part in text.split(","):
        pair = part.strip()
        if not pair:
            continue
        # The issuer starts at the last "=http(s)://": a name may be an MCP server's URL,
        # whose query has "=" of its own (a dynamically registered client's issuer).
        lowered = pair.lower()
        cut = max(lowered.rfind("=http://"), lowered.rfind("=https://"))
        name, sep, issuer = (pair[:cut], "=", pair[cut + 1 :]) if cut > 0 else pair.partition("=")
        name, issuer = name.strip(), issuer.strip()
        where = f"PSYCH_MCP_OAUTH_ISSUERS entry {pair!r}"
        if not sep or not name:
            raise SpecError(f"{where}: expected <credential name>=<issuer URL> ({_COMMA})")
        # An issuer has no query or fragment (RFC 8414). One whose query holds "=http(s)://"
        # would be cut there: the name before it, not a URL, then holds the issuer's start.
        named_url = name.lower().startswith(("http://", "https://"))
        cut_query = not named_url and _ISSUER_START.search(name) is not None
        _add(issuers, name, issuer, where, _COMMA, cut_query)
    return issuers


class _Pairs(list[tuple[str, object]]):
    """A JSON object's pairs, in order (``json.loads``' ``object_pairs_hook``)."""


def _parse_json(text: str) -> dict[str, str]:
    """``PSYCH_MCP_OAUTH_ISSUERS``'s JSON form.

    Raises:
        SpecError: not JSON, an issuer that is not a string, a name given twice, an
            empty name, or an issuer that is not an http(s) URL without query or fragment
            (each named).
    """
    try:  # every object as its pairs, in order: a name given twice is seen
        decoded = json.loads(text, object_pairs_hook=_Pairs)
    except ValueError as err:
        raise SpecError(
            f"PSYCH_MCP_OAUTH_ISSUERS starts with '{{': its JSON form does not parse ({err})"
        ) from err
    pairs: _Pairs = decoded  # the text starts with "{": an object, or no JSON at all
    issuers: dict[str, str] = {}
    for name, issuer in pairs:
        where = f"PSYCH_MCP_OAUTH_ISSUERS entry {name!r}"
        if not isinstance(issuer, str):
            raise SpecError(f"{where}: the issuer must be a string (an http(s) URL)")
        _add(issuers, name.strip(), issuer.strip(), where)
    return issuers


def _add(
    issuers: dict[str, str],
    name: str,
    issuer: str,
    where: str,
    hint: str = "",
    cut_query: bool = False,
) -> None:
    """Add ``name``'s ``issuer`` to ``issuers``.

    Raises:
        SpecError: an empty name, one given twice, or an issuer that is not an http(s) URL
            or has a query or fragment (``cut_query``: an entry cut inside one).
    """
    said = f" ({hint})" if hint else ""
    if not name:
        expected = "expected <credential name>=<issuer URL>" if hint else "the name is empty"
        raise SpecError(f"{where}: {expected}{said}")
    if name in issuers:
        raise SpecError(f"{where}: credential {name!r} is given twice")
    parts = urlsplit(issuer)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SpecError(f"{where}: the issuer must be an http(s) URL{said}")
    if parts.query or parts.fragment or cut_query:
        raise SpecError(f"{where}: an issuer URL has no query or fragment (RFC 8414)")
    issuers[name] = issuer
