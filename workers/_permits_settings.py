"""The settings file's ``permits`` section: what each tenant may use (a ``StaticPermits``;
``WorkerSettings.permits`` and it are combined by ``permits_with_file``, ``_worker_settings``).

Only the global settings file may set it (a project checkout must not widen what a tenant
may use)::

    permits:
      tenants:
        acme:
          code_tools: ["lookup_*"]         # the worker's code tools, by name
          http_tools: []                   # no HTTP tools at all
          mcp_servers:                     # by URL, exactly as Specs write it; a server
            "https://mcp.acme.example/mcp": ["lookup*"]   # not listed: none of its tools
          a2a_peers:
            "https://agents.example/billing": ["*"]
      default:                             # every tenant not under tenants
        mcp_servers: {}                    # no MCP server at all

Every field is three-state: left out, no restriction of that kind; a list (or mapping), only
what it names. A tenant under neither ``tenants`` nor a ``default`` is not restricted.
Patterns are ``allow``'s: an exact name, or a prefix ending in ``*``.
"""

from __future__ import annotations

import re
from typing import Any

from psych_runtime.specs import Permits, SpecError, StaticPermits
from psych_runtime.workers._settings_file import unknown_settings

_SECTION_KEYS = ("default", "tenants")
_PERMIT_KEYS = ("a2a_peers", "code_tools", "http_tools", "mcp_servers")
_TENANT = re.compile(r"[a-zA-Z0-9_.]{1,128}")
"""A tenant as ``Scope.tenant`` allows it (a key no Scope can carry would permit nobody)."""


def parse_permits(value: Any, where: str, problems: list[str]) -> StaticPermits | None:
    """The ``permits`` section at ``where``; every problem goes to ``problems``."""
    if not isinstance(value, dict):
        problems.append(f"{where}: a mapping of {', '.join(_SECTION_KEYS)}, not {value!r}")
        return None
    found = len(problems)
    problems += unknown_settings(value, where, _SECTION_KEYS)
    tenants: dict[str, Permits] = {}
    table = value.get("tenants")
    if table is not None and not isinstance(table, dict):
        problems.append(f"{where}.tenants: a mapping of tenant to its permits, not {table!r}")
    for tenant, entry in (table if isinstance(table, dict) else {}).items():
        at = f"{where}.tenants.{tenant}"
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            problems.append(
                f"{at}: not a tenant (1 to 128 letters, digits, '_' and '.', as a Scope's)"
            )
            continue
        permits = _permits(entry, at, problems)
        if permits is not None:
            tenants[tenant] = permits
    default = None
    if value.get("default") is not None:
        default = _permits(value["default"], f"{where}.default", problems)
    if len(problems) > found:
        return None
    return StaticPermits(tenants=tenants, default=default)


def _permits(value: Any, where: str, problems: list[str]) -> Permits | None:
    if not isinstance(value, dict):
        problems.append(f"{where}: a mapping of {', '.join(_PERMIT_KEYS)}, not {value!r}")
        return None
    found = len(problems)
    problems += unknown_settings(value, where, _PERMIT_KEYS)
    fields: dict[str, Any] = {}
    for key in ("code_tools", "http_tools"):
        if key in value:
            fields[key] = _patterns(value[key], f"{where}.{key}", problems)
    for key in ("mcp_servers", "a2a_peers"):
        if key not in value:
            continue
        table = value[key]
        if not isinstance(table, dict):
            problems.append(f"{where}.{key}: a mapping of URL to tool patterns, not {table!r}")
            continue
        urls: dict[str, tuple[str, ...]] = {}
        for url, patterns in table.items():
            if not isinstance(url, str) or not url:
                problems.append(f"{where}.{key}: {url!r} is not a URL")
                continue
            urls[url] = _patterns(patterns, f"{where}.{key}[{url!r}]", problems)
        fields[key] = urls
    try:
        permits = Permits(**fields)
    except SpecError as err:  # a pattern no name can match: allow's own check, named here
        problems.extend(f"{where}.{line}" for line in str(err).splitlines())
        return None
    return permits if len(problems) == found else None


def _patterns(value: Any, where: str, problems: list[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.append(f"{where}: a list of names and prefixes ending in '*', not {value!r}")
        return ()
    return tuple(value)
