"""What a Run offers the model: its built-ins and its code and HTTP tools, resolved once
at the start of the Run by the catalogue activity (which also stores the definitions, so
each model call carries only their ref). MCP tools join them at every turn boundary
(``_mcp.py``)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import CatalogInput, ToolCatalog
    from psych_runtime.specs import AgentSpec, HttpTool, WorkflowSpec
    from psych_runtime.workflows.contract._records import RunStatus
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel._outcome import Stop
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_calls import ToolCalls


async def resolve(run: ToolCalls, *, builtins: bool = True) -> ToolCatalog:
    """The Run's catalogue (``builtins`` False: its code and HTTP tools only).

    Raises:
        Stop: FAILED when the tools cannot be resolved (a code tool not registered).
    """
    spec = run._spec
    try:
        catalog = await calls.resolve_catalog(
            CatalogInput(
                run_id=run._input.run_id,
                code_tools=tuple(t.name for t in spec.tools if t.kind == "code"),
                http_tools=tuple(t for t in spec.tools if isinstance(t, HttpTool)),
                builtins=run._offered_builtins() if builtins else (),
            )
        )
    except ActivityError as err:
        raise Stop(RunStatus.FAILED, f"tools: {cause_text(err)}") from err
    except FailureError as err:
        # A local catalogue's failure reaches the workflow as the activity's own error (a
        # ToolNotRegistered ApplicationError), not an ActivityError: before the patch it
        # failed the workflow unsettled (no run_settled, the status left running), and a
        # Run recorded so replays so. A last attempt that timed out is an ActivityError
        # live (above, patch or not) and its bare TimeoutError where its marker replays:
        # that settles every Run as it did live (history catalog_timed_out_before_settles).
        if not run._start.catalog_settles and not isinstance(err, TemporalTimeoutError):
            raise
        # Its own text ("<type>: <message>"), as an ActivityError's cause reads above.
        raise Stop(RunStatus.FAILED, f"tools: {err}") from err
    run._left_out = left_out(spec, catalog)
    return catalog


def left_out(spec: AgentSpec | WorkflowSpec, catalog: ToolCatalog) -> tuple[str, ...]:
    """The code and HTTP tools of ``spec`` that ``catalog`` left out: the tenant's permits
    refuse them (the catalogue leaves a tool out for nothing else). Read when a Run's
    catalogue is resolved and when a continued WorkflowRun takes the one it carried."""
    offered = {entry.name for entry in catalog.entries}
    return tuple(tool.name for tool in spec.tools if tool.name not in offered)
