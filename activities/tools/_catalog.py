"""What a Run's catalogue says of an HTTP tool and of a built-in: the definition the model
is shown, and the facts the workflow and the Policy read (``ToolActivities.catalog``); a
code tool of the worker's registry, or ``ToolNotRegistered``; and
which of its code and HTTP tools the Run's tenant is permitted (``catalogue_permits``), and
whether it still is at a call (``unpermitted``)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from psych_runtime.activities.contract import (
    WORKFLOW_ID_PREFIX,
    CatalogEntry,
    CatalogInput,
    ErrorType,
    PolicyDecision,
    ToolDefinition,
    ToolInfo,
    ids_from,
    unpermitted_message,
)
from psych_runtime.activities.tools._http import NOT_SAFE_TO_REPEAT
from psych_runtime.specs import (
    HttpTool,
    PermitKind,
    PermitSource,
    RegistryError,
    Scope,
    TenantPermits,
    ToolDef,
    ToolRegistry,
    matches,
    permitted_by,
)

Permitted = tuple[str, ...] | None
"""What a tenant is permitted of one kind of tool (None: no restriction)."""


async def catalogue_permits(
    permits: TenantPermits | None, input: CatalogInput
) -> tuple[Permitted, Permitted]:
    """What the Run's tenant is permitted of its code tools and of its HTTP tools, so that
    the catalogue offers the model none it may not call (as MCP discovery and A2A cards
    leave out what is not permitted). The tenant is read off the Run's workflow id
    (``psych-<tenant>-<run id>``, which the workflow checks at its start), so neither the
    input nor the workflow's commands change. A kind the Run has no tool of is not asked.

    Raises:
        ApplicationError: ``BadInput`` (non-retryable) when a port is set and the workflow
            id names no tenant: the catalogue cannot be narrowed, so it is not offered.
        Exception: what the port raises, and ``permitted_by``'s ``TypeError`` for a
            malformed answer: the catalogue fails (and is retried as any failure of it).
    """
    if permits is None or not (input.code_tools or input.http_tools):
        return None, None
    workflow_id = activity.info().workflow_id
    named = ids_from(workflow_id)
    if named is None:
        raise ApplicationError(
            f"the tools of Run {input.run_id!r} cannot be narrowed by the tenant's permits: "
            f"its workflow id {workflow_id!r} is not '{WORKFLOW_ID_PREFIX}<tenant>-<run id>'",
            type=ErrorType.BAD_INPUT,
            non_retryable=True,
        )
    tenant = named[0]

    async def ask(kind: PermitKind, wanted: bool) -> Permitted:
        return await permitted_by(permits, tenant, PermitSource(kind)) if wanted else None

    return await ask("code", bool(input.code_tools)), await ask("http", bool(input.http_tools))


async def unpermitted(
    permits: TenantPermits | None, kind: PermitKind, name: str, scope: Scope
) -> str | None:
    """Why ``scope``'s tenant may not call the ``kind`` tool ``name``, or None. A call asks
    it before any hook, as MCP's and A2A's checks are: no hook may turn it into a result.
    ``PsychClient.dispatch`` refuses such a Run before it starts and the catalogue leaves
    the tool out; this holds for a Run started otherwise (the ``temporal`` CLI, a client
    without the permits) and for a permit revoked since the catalogue offered the tool."""
    permitted = await permitted_by(permits, scope.tenant, PermitSource(kind))
    if permitted is None or matches(name, permitted):
        return None
    return unpermitted_message(kind, name, scope.tenant)


def http_definition(tool: HttpTool) -> ToolDefinition:
    """The definition the model is shown of ``tool``."""
    # Validation reads a schema without "type" as an object; providers refuse a function
    # whose parameters do not say so (OpenAI's 400: "schema must be a JSON Schema of
    # 'type: object'").
    parameters = {"type": "object", "properties": {}, **tool.input_schema}
    return ToolDefinition(name=tool.name, description=tool.description, parameters=parameters)


def http_info(tool: HttpTool) -> ToolInfo:
    """What the Policy reads of ``tool``: HTTP's own semantics annotate a request (GET is
    safe, read-only; DELETE destroys; everything else is a write, as an unannotated tool
    is)."""
    return ToolInfo(
        name=tool.name,
        kind="http",
        read_only=tool.method == "GET" or None,
        destructive=tool.method == "DELETE" or None,
    )


def registered_code_tool(registry: ToolRegistry, name: str) -> ToolDef:
    """The code tool ``name`` of the worker's ``registry``.

    Raises:
        ApplicationError: ``ToolNotRegistered``, non-retryable: a deployment error, not
            the model's, which retrying on this worker cannot help.
    """
    try:
        return registry.get(name)
    except RegistryError as err:
        raise ApplicationError(
            f"code tool {name!r} is not registered: it must be registered in the "
            "worker's ToolRegistry (every worker polling this task queue needs it)",
            type=ErrorType.TOOL_NOT_REGISTERED,
            non_retryable=True,
        ) from err


def http_safe_to_repeat(tool: HttpTool) -> bool:
    """Whether a call of ``tool`` may run again (its method is safe or idempotent)."""
    return tool.method not in NOT_SAFE_TO_REPEAT


def builtin_entry(builtin: ToolDefinition) -> CatalogEntry:
    """A built-in's entry: it acts only on the Run itself; the Policy governs tools of the
    world."""
    return CatalogEntry(
        name=builtin.name,
        kind="builtin",
        safe_to_repeat=True,
        info=ToolInfo(name=builtin.name, kind="builtin", read_only=True),
        policy=PolicyDecision(decision="allow", reason="built-in"),
    )
