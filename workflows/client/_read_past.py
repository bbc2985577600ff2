"""What a listing says of the rows Temporal's visibility answered it that it does not show:
other tenants' Runs (a store that matches ``PsychTenant`` loosely) and workflows that carry
the tenant's ``PsychTenant`` but are not psych Runs (their ids are not
``psych-<tenant>-<run id>``: started by hand, or by another system). Neither is the
caller's to see; both are the operator's to know, and past ``FOREIGN_MAX`` of them a page
ends short (its cursor, if any, reads on past them)."""

from __future__ import annotations

from collections.abc import Sequence

from psych_runtime.workflows.contract._contract import SA_TENANT

STRAYS_NAMED = 3
"""How many ids of workflows that are not psych Runs a listing's warning names."""


def read_past(tenant: str, foreign: int, strays: Sequence[str], short: str) -> list[str]:
    """The warnings of a listing of ``tenant``'s Runs that read past ``foreign`` Runs of
    other tenants and ``strays`` (the ids of workflows that are not psych Runs); ``short``:
    where the page ended short because of them ("" when it did not), said once, last."""
    ended = f"; the listing ended short at {short}" if short else ""
    warnings: list[str] = []
    if foreign:
        warnings.append(
            f"the visibility store answered {foreign} Run(s) of other tenants to a listing "
            f"of tenant {tenant!r} (it matches {SA_TENANT} loosely: a case-insensitive "
            f"collation?){'' if strays else ended}"
        )
    if strays:
        named = ", ".join(repr(workflow_id) for workflow_id in strays[:STRAYS_NAMED])
        more = f" and {len(strays) - STRAYS_NAMED} more" if len(strays) > STRAYS_NAMED else ""
        warnings.append(
            f"{len(strays)} workflow(s) carry tenant {tenant!r}'s {SA_TENANT} but are not "
            f"psych Runs (their ids are not psych-<tenant>-<run id>: started by hand, or by "
            f"another system?): {named}{more}; left out of its listing{ended}"
        )
    return warnings
