"""HTTP tools: a call's request built from the tool's URL template, headers and credential,
and sent within the tool's timeout. Failures the model should read are ``ToolError``s."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from psych_runtime.activities.contract import HttpToolCall
from psych_runtime.activities.egress import EgressDenied, never_sent
from psych_runtime.activities.secrets import Redactor, SecretResolver, resolve_secret
from psych_runtime.activities.telemetry import http_span
from psych_runtime.specs import HttpTool, NotFound, host_placeholders

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
"""A URL template placeholder; the same pattern publish-time validation checks."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
NOT_SAFE_TO_REPEAT = frozenset({"POST", "PATCH"})
_HEADER_TEXT = re.compile(r"[\t\x20-\x7e]+")
"""What a header value may hold as the client sends it: visible ASCII, spaces and tabs."""


class ToolError(Exception):
    """A failure the model reads as the tool's result (an outcome with status "error")."""


async def build_request(
    client: httpx.AsyncClient,
    secrets: SecretResolver | None,
    input: HttpToolCall,
    redact: Redactor,
) -> httpx.Request:
    """The request of one HTTP tool call: its URL template filled (path arguments
    percent-encoded), the rest as a JSON body or query pairs, the credential as a bearer
    header (added to ``redact``).

    Raises:
        ToolError: a missing argument, an unresolvable credential, an invalid URL.
    """
    tool = input.tool
    steered = host_placeholders(tool.url)
    if steered:  # validation refuses these; a Version stored before it did is refused here
        raise ToolError(
            f"{tool.name}: its URL puts {{{steered[0]}}} in the scheme, host or port; "
            "arguments may fill the path and the query only"
        )
    used: set[str] = set()

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        value = input.arguments.get(name)
        if value is None:
            raise ToolError(f"{tool.name}: missing argument {name!r} (used in its URL)")
        used.add(name)
        return quote(_url_text(value), safe="")

    url = _PLACEHOLDER.sub(fill, tool.url)
    _refuse_other_resources(tool, input.arguments)
    if urlsplit(url)[:2] != urlsplit(_PLACEHOLDER.sub("", tool.url))[:2]:
        raise ToolError(f"{tool.name}: its arguments would change the URL's scheme, host or port")
    rest = {name: value for name, value in input.arguments.items() if name not in used}
    headers = dict(tool.headers)
    if tool.credential is not None:
        secret = await credential_value(secrets, input, tool.credential)
        redact.add(tool.credential, secret)
        if not _HEADER_TEXT.fullmatch(secret):
            # Sent, it would fail in the HTTP layer with an error quoting the header (as
            # bytes, in a form redaction may not know), or go out cut short.
            raise ToolError(
                f"{tool.name}: credential {tool.credential!r} cannot be sent: its value has "
                "a character an HTTP header cannot carry (a line break, such as a trailing "
                "newline, another control character, or non-ASCII text); nothing was sent"
            )
        headers["Authorization"] = f"Bearer {secret}"
    timeout = httpx.Timeout(tool.timeout_seconds)
    try:
        if tool.method in _BODY_METHODS:
            return client.build_request(
                tool.method, url, json=rest, headers=headers, timeout=timeout
            )
        params: list[tuple[str, str | int | float | bool | None]] = [
            (name, _url_text(item))
            for name, value in rest.items()
            for item in (value if isinstance(value, list) else [value])
        ]
        # httpx's `params=` replaces the URL's query, but the template's own query
        # (`?expand=items&id={order_id}`) is part of the tool: keep its pairs, first,
        # and append the arguments' pairs after them. An argument naming a key the
        # template fixes is refused: appended, a server reading the last value would
        # take the model's over what the tool fixed.
        target = httpx.URL(url)
        fixed = target.params.multi_items()
        if clash := sorted({name for name, _ in fixed} & set(rest)):
            raise ToolError(
                f"{tool.name}: argument(s) {', '.join(map(repr, clash))} name query "
                f"keys its URL fixes; leave them out"
            )
        target = target.copy_with(params=[*fixed, *params])
        return client.build_request(tool.method, target, headers=headers, timeout=timeout)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as err:
        raise ToolError(f"{tool.name}: invalid URL {url!r}: {err}") from err


def _refuse_other_resources(tool: HttpTool, arguments: dict[str, Any]) -> None:
    """Refuse arguments that fill a whole segment of the URL's path with ``..``, ``.`` or
    nothing: percent-encoding leaves dots as they are, and ``/v1/orders/{id}/items`` with
    ``..`` is ``/v1/items`` once dot segments are removed (RFC 3986 §5.2.4, which httpx
    applies before sending), an empty one another resource again (``/v1/orders//items``).

    Raises:
        ToolError: naming the arguments and the segment they would make.
    """
    names = _PLACEHOLDER.findall(tool.url)
    marked = tool.url
    for index, name in enumerate(names):
        marked = marked.replace(f"{{{name}}}", f"\x00{index}\x00", 1)
    for segment in urlsplit(marked).path.split("/"):
        used = [names[int(index)] for index in re.findall(r"\x00(\d+)\x00", segment)]
        if not used:
            continue
        filled = re.sub(
            r"\x00(\d+)\x00",
            lambda match: quote(_url_text(arguments[names[int(match.group(1))]]), safe=""),
            segment,
        )
        if filled not in ("", ".", ".."):
            continue
        if len(used) == 1:
            which = f"argument {used[0]!r} is {filled!r}, which"
        else:
            which = f"arguments {', '.join(map(repr, used))} make {filled!r}, which"
        raise ToolError(
            f"{tool.name}: {which} cannot fill a whole segment of its URL's path "
            "(it would address another resource)"
        )


async def credential_value(
    secrets: SecretResolver | None, input: HttpToolCall, credential: str
) -> str:
    """The secret ``credential`` names for the call's Scope.

    Raises:
        ToolError: there is no resolver or no such secret.
    """
    # Messages name the credential and never carry its value.
    if secrets is None:
        raise ToolError(
            f"{input.tool.name}: credential {credential!r} cannot be resolved: "
            "this worker has no SecretResolver"
        )
    try:
        return await resolve_secret(secrets, input.scope, credential)
    except NotFound as err:
        raise ToolError(f"{input.tool.name}: credential {credential!r} is not available") from err


async def send_request(client: httpx.AsyncClient, tool: HttpTool, request: httpx.Request) -> str:
    """Send ``request`` within the tool's timeout; the response text.

    Raises:
        EgressDenied: the egress policy refused the request's connection (never sent).
        ToolError: a timeout, a transport failure (``never_sent`` says whether the request
            left), an error status, a redirect the egress policy refused (sent).
    """
    target = f"{request.method} {request.url.copy_with(query=None)}"
    try:
        # httpx's timeout bounds each phase; this bounds the whole exchange.
        async with asyncio.timeout(tool.timeout_seconds):
            with http_span(
                request.method,
                str(request.url.copy_with(query=None)),
                request.url.host,
                template=urlunsplit(urlsplit(tool.url)._replace(query="", fragment="")),
            ) as span:
                response = await client.send(request)
                span.status(response.status_code)
    except EgressDenied as err:
        if never_sent(err):
            raise  # refused before it left: the call's outcome is "denied"
        raise ToolError(
            f"{tool.name}: {target} was sent; the server answered with a redirect that the "
            f"egress policy refused: {err}"
        ) from err
    except (TimeoutError, httpx.TimeoutException) as err:
        raise ToolError(
            f"{tool.name}: {target} timed out after {tool.timeout_seconds:g} s"
        ) from err
    except (httpx.HTTPError, httpx.InvalidURL) as err:
        raise ToolError(f"{tool.name}: {target} failed: {type(err).__name__}: {err}") from err
    if response.status_code >= 400:
        raise ToolError(f"HTTP {response.status_code} {response.reason_phrase}: {response.text}")
    return response.text


def _url_text(value: Any) -> str:
    """An argument as URL text: strings as they are, other JSON values as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)
