"""Model-facing names of MCP tools, and narrowing by ``McpServer.allow``. Pure.

The model sees a server's tool as ``<server>__<tool>``. Providers accept tool names of
``[a-zA-Z0-9_-]`` up to 64 characters, while server names may hold ``.`` and MCP tool names
may hold ``.``, ``/`` and more, so each name is sanitised (every other character becomes
``_``) and, when longer than 64, cut and given a stable suffix: ``-`` and the first hex
digits of the sha256 of the original pair, the same on every worker and every turn.

Sanitising and cutting can map two tools to one name. A tool whose ``<server>__<tool>``
needs no change always keeps it: a tool sanitised into that name gets the hash suffix, so a
tool the server adds mid-Run never takes a name the model has been calling another tool by
(``x.y`` appearing beside ``x_y`` leaves ``s__x_y`` meaning ``x_y``). Other collisions go
by the original ``(server, tool)`` pair, sorted: the first keeps the name, each later one
gets the suffix. Every name that is not exactly ``<server>__<tool>`` is reported as a
``renamed`` triple so the Run can record what the model was shown.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from psych_runtime.specs import MCP_TOOL_SEPARATOR, narrow, sanitise_tool_name

MAX_TOOL_NAME = 64
"""The longest tool name providers accept (OpenAI's limit; others allow as much or more)."""

_SUFFIX_HEX = 8
"""Hex digits of the hash suffix: enough that two tools of one catalogue share it only by
accident of about one in four billion (longer suffixes are taken when they do)."""


@dataclass(frozen=True)
class ToolNaming:
    """The model-facing names of a set of MCP tools."""

    names: dict[tuple[str, str], str]
    """``(server, tool)`` -> the name the model sees."""
    renamed: tuple[tuple[str, str, str], ...]
    """``(model name, server, tool)`` for each name that is not ``<server>__<tool>``,
    sorted by model name."""


def sanitise(text: str) -> str:
    """``text`` with every character outside ``[a-zA-Z0-9_-]`` replaced by ``_`` (the rule
    is the Spec layer's, which a workflow's tool steps are validated by)."""
    return sanitise_tool_name(text)


def _digest(server: str, tool: str) -> str:
    # JSON of the pair: "a__b" + "c" and "a" + "b__c" must not hash alike.
    return hashlib.sha256(json.dumps([server, tool]).encode()).hexdigest()


def _joined(server: str, tool: str) -> str:
    return sanitise(server) + MCP_TOOL_SEPARATOR + sanitise(tool)


def _suffixed(base: str, server: str, tool: str, digits: int) -> str:
    digest = _digest(server, tool)
    # Past the digest's 64 digits (never met in practice) a counter keeps names apart.
    suffix = "-" + (digest[:digits] if digits <= len(digest) else f"{digest[:8]}{digits}")
    return base[: MAX_TOOL_NAME - len(suffix)] + suffix


def _unchanged(server: str, tool: str) -> bool:
    return plain_name(server, tool) == f"{server}{MCP_TOOL_SEPARATOR}{tool}"


def plain_name(server: str, tool: str) -> str:
    """The name before collisions are resolved: sanitised, and cut with a suffix when
    longer than ``MAX_TOOL_NAME``."""
    base = _joined(server, tool)
    if len(base) <= MAX_TOOL_NAME:
        return base
    return _suffixed(base, server, tool, _SUFFIX_HEX)


def name_tools(tools: Iterable[tuple[str, str]], *, reserved: Iterable[str] = ()) -> ToolNaming:
    """Name every ``(server, tool)`` pair, resolving collisions deterministically.

    Args:
        tools: the pairs to name (order does not matter; duplicates are named once).
        reserved: names already taken (the Run's other tools): an MCP tool whose name
            would equal one gets the hash suffix instead.

    Returns:
        The names, unique among themselves and distinct from ``reserved``.
    """
    taken = set(reserved)
    names: dict[tuple[str, str], str] = {}
    # Names needing no change first: they keep them whatever else the server lists.
    for server, tool in sorted(set(tools), key=lambda pair: (not _unchanged(*pair), pair)):
        name = plain_name(server, tool)
        attempt = 0
        while name in taken:
            name = _suffixed(_joined(server, tool), server, tool, _SUFFIX_HEX + 4 * attempt)
            attempt += 1
        taken.add(name)
        names[(server, tool)] = name
    renamed = sorted(
        (name, server, tool)
        for (server, tool), name in names.items()
        if name != f"{server}{MCP_TOOL_SEPARATOR}{tool}"
    )
    return ToolNaming(names=names, renamed=tuple(renamed))


def allowed_tools(
    offered: Iterable[str], allow: Sequence[str], permitted: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The server's own tool names the tenant is ``permitted`` (None: all) and ``allow``
    grants (empty ``allow``: all), sorted.

    Both name the server's tools as the server calls them, not as the model sees them, so
    narrowing happens before naming, through the one ``narrow``.
    """
    return narrow(offered, allow=allow, permitted=permitted)
