"""How an MCP server's tools are named to the model and to a workflow's tool steps, and
what a tool step may name.

The model sees a server's tool as ``<server>__<tool>`` with each part sanitised (every
character outside ``[a-zA-Z0-9_-]``, which providers refuse in a tool name, becomes ``_``),
cut and given a hash suffix (``-`` and hex digits) when too long or when two tools would
share a name (``activities/mcp/_names.py``). A workflow's ``ToolStep.tool`` names an MCP
tool by that same name, so a server named ``my.tools`` offers ``my_tools__echo``, never
``my.tools__echo``; and a server's ``allow`` grants its tools by their own names, so a step
may name only a tool that an entry can match. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from psych_runtime.specs._models import McpServer

MCP_TOOL_SEPARATOR = "__"
"""MCP tools reach the model as ``<server>__<tool>``."""

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_SUFFIXED = re.compile(r"-[0-9a-f]{8,}$")
"""The end of a name that was cut or told apart by a hash suffix: which tool it is cannot
be read from the name, so ``allow`` is not checked against it."""


def sanitise_tool_name(text: str) -> str:
    """``text`` with every character outside ``[a-zA-Z0-9_-]`` replaced by ``_``."""
    return _UNSAFE.sub("_", text)


def _granted(part: str, allow: Sequence[str]) -> bool:
    """Whether a tool whose sanitised name is ``part`` may be one ``allow`` grants: a tool
    that matches an entry has a sanitised name that matches the sanitised entry."""
    for pattern in allow:
        if pattern.endswith("*"):
            if part.startswith(sanitise_tool_name(pattern[:-1])):
                return True
        elif part == sanitise_tool_name(pattern):
            return True
    return False


def _prefix(server: McpServer) -> str:
    return sanitise_tool_name(server.name) + MCP_TOOL_SEPARATOR


def mcp_step_problem(tool: str, servers: Sequence[McpServer]) -> str | None:
    """Why a tool step's ``tool``, which names none of the workflow's own tools, names no
    tool of its MCP ``servers`` either, or one the server's ``allow`` does not grant; None
    when it may (what a server offers is known only at run time)."""
    refused = []
    for server in servers:
        part = tool[len(_prefix(server)) :]
        if not tool.startswith(_prefix(server)) or sanitise_tool_name(part) != part:
            continue
        if not server.allow or _SUFFIXED.search(part) or _granted(part, server.allow):
            return None
        refused.append(server)
    if refused:
        grants = "; ".join(f"{s.name!r} allows only {', '.join(s.allow)}" for s in refused)
        return f"{tool!r} is never callable: its MCP server does not allow it ({grants})"
    near = [s for s in servers if tool.startswith((_prefix(s), s.name + MCP_TOOL_SEPARATOR))]
    if near:
        return (
            f"{tool!r} is not one of the workflow's tools: MCP server {near[0].name!r} offers "
            f"its tools as {_prefix(near[0])}<tool>, every character of <tool> outside "
            "[a-zA-Z0-9_-] written _"
        )
    return f"{tool!r} is not one of the workflow's tools"
