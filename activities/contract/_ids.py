"""A Run's workflow id, ``psych-<tenant>-<run id>``: made by the client, read by the
workflow, its activities and the workers (defined here, where every side may import it).

Tenants cannot contain ``-``, so the tenant reads back off the id (clients authorize by
it), and the slim payloads leave out the tenant and run id the id names.
"""

from __future__ import annotations

WORKFLOW_ID_PREFIX = "psych-"


def workflow_id_for(tenant: str, run_id: str) -> str:
    """The workflow id of a Run: ``psych-<tenant>-<run id>``."""
    return f"{WORKFLOW_ID_PREFIX}{tenant}-{run_id}"


def ids_from(workflow_id: str | None) -> tuple[str, str] | None:
    """``(tenant, run id)`` named by a Run's workflow id, or None when it names none (or
    there is no workflow)."""
    if workflow_id is None or not workflow_id.startswith(WORKFLOW_ID_PREFIX):
        return None
    tenant, _, run_id = workflow_id.removeprefix(WORKFLOW_ID_PREFIX).partition("-")
    return (tenant, run_id) if tenant and run_id else None
