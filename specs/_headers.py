"""An HTTP tool's literal headers as a request can carry them.

``HttpTool.headers`` are sent with every call. A name or value HTTP/1.1 cannot carry (a
space in a name, a line break or a non-ASCII character in a value) fails every call the
tool makes, after the Version was accepted; a header the client computes for each request
(``Host``, ``Content-Length``, ``Transfer-Encoding``) either breaks every request or sends
it somewhere the egress policy did not judge. Publish-time validation finds them here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from psych_runtime.specs._problem import Problem

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name: an RFC 9110 token."""

_VALUE = re.compile(r"[\t\x20-\x7e]*")
"""A header value the tool's client sends: visible ASCII, spaces and tabs (httpx encodes a
value as ASCII; a line break would end the header)."""

_PER_REQUEST = {
    "host": "the egress policy judges the URL's host, and a Host header would address "
    "another site behind the same server; put the host in the URL",
    "content-length": "the client sets it from each request's body",
    "transfer-encoding": "the client frames each request's body itself; a second framing "
    "next to Content-Length is read differently by different servers",
}
"""Headers the client computes for each request, and why a literal one is refused."""


def header_problems(headers: Mapping[str, str], path: str) -> list[Problem]:
    """Literal headers no request can carry as written: a name that is not a token, a value
    with a control character (a line break) or non-ASCII text, a header the client sets
    for each request. A problem names the header, never quotes its value."""
    problems = []
    for name in sorted(headers):
        where = f"{path}[{name}]"
        if not _TOKEN.fullmatch(name):
            problems.append(
                Problem(
                    where,
                    "not a header name: a name is letters, digits and !#$%&'*+-.^_`|~ "
                    "(no spaces, colons or line breaks)",
                )
            )
            continue
        why = _PER_REQUEST.get(name.lower())
        if why is not None:
            problems.append(Problem(where, f"a literal {name} header is refused: {why}"))
        if not _VALUE.fullmatch(headers[name]):
            problems.append(
                Problem(
                    where,
                    "the value has a character a header cannot carry: a line break or "
                    "another control character, or non-ASCII text (percent-encode it)",
                )
            )
    return problems
