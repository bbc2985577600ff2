"""The settings file's ``egress`` section: where the worker's Spec URLs may connect.

Only the global settings file may set it (a project checkout must not widen where the
worker connects)::

    egress:
      allow: ["10.20.0.0/16", "*.corp.example"]   # CIDRs and host patterns
      deny: ["*.internal.example"]
      max_response_bytes: 16777216
      tenants:
        acme: {allow: ["api.acme.example"], deny: []}

It adds to what the worker was given (``WorkerSettings.egress``: code, or
``PSYCH_EGRESS_ALLOW`` / ``PSYCH_EGRESS_DENY``): lists are joined, a tenant named in both
gets both lists, and the file's ``max_response_bytes`` replaces the given one.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from psych_runtime.activities.egress import EgressRules, EgressSettings
from psych_runtime.workers._settings_file import unknown_settings

_SECTION_KEYS = frozenset({"allow", "deny", "max_response_bytes", "tenants"})
_RULE_KEYS = frozenset({"allow", "deny"})


def parse_egress(value: Any, where: str, problems: list[str]) -> EgressSettings | None:
    """The ``egress`` section at ``where``; every problem goes to ``problems``."""
    if not isinstance(value, dict):
        problems.append(f"{where}: a mapping of allow, deny, max_response_bytes, tenants")
        return None
    problems += unknown_settings(value, where, sorted(_SECTION_KEYS))
    rules = _rules(value, where, problems)
    tenants: dict[str, EgressRules] = {}
    table = value.get("tenants") or {}
    if not isinstance(table, dict):
        problems.append(f"{where}.tenants: a mapping of tenant to allow/deny lists")
    else:
        for tenant, entry in table.items():
            at = f"{where}.tenants.{tenant}"
            if not isinstance(entry, dict) or not set(entry) <= _RULE_KEYS:
                problems.append(f"{at}: a mapping with allow and deny lists, not {entry!r}")
                continue
            parsed = _rules(entry, at, problems)
            if parsed is not None:
                tenants[str(tenant)] = parsed
    try:
        settings = EgressSettings(rules=rules or EgressRules(), tenants=tenants)
        if "max_response_bytes" in value:
            settings = EgressSettings(
                rules=settings.rules,
                tenants=settings.tenants,
                max_response_bytes=value["max_response_bytes"],
            )
    except ValidationError as err:
        problems.append(f"{where}.max_response_bytes: {err.errors()[0]['msg']}")
        return None
    return settings


def _rules(value: dict[str, Any], where: str, problems: list[str]) -> EgressRules | None:
    lists: dict[str, str] = {}
    for key in ("allow", "deny"):
        entries = value.get(key) or []
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            problems.append(f"{where}.{key}: a list of CIDRs and host patterns, not {entries!r}")
            return None
        lists[key] = ",".join(entries)
    try:
        return EgressRules.parse(lists["allow"], lists["deny"])
    except ValueError as err:
        problems.append(f"{where}: {err}")
        return None


def merged(given: EgressSettings, file: EgressSettings | None) -> EgressSettings:
    """``given`` with a settings file's section added (see the module docstring)."""
    if file is None:
        return given
    tenants = dict(given.tenants)
    for tenant, rules in file.tenants.items():
        tenants[tenant] = _joined(tenants[tenant], rules) if tenant in tenants else rules
    return EgressSettings(
        rules=_joined(given.rules, file.rules),
        tenants=tenants,
        max_response_bytes=file.max_response_bytes
        if "max_response_bytes" in file.model_fields_set
        else given.max_response_bytes,
    )


def _joined(first: EgressRules, second: EgressRules) -> EgressRules:
    return EgressRules(
        allow_hosts=(*first.allow_hosts, *second.allow_hosts),
        allow_cidrs=(*first.allow_cidrs, *second.allow_cidrs),
        deny_hosts=(*first.deny_hosts, *second.deny_hosts),
        deny_cidrs=(*first.deny_cidrs, *second.deny_cidrs),
    )
