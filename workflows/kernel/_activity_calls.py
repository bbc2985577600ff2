"""Every activity a Run schedules: its name, its options and its typed call, in one table.

Retries belong to the workflow: model calls and tools not safe to repeat run once (the Run
counts model retries against its budget; a tool not safe to repeat is never run twice);
tools safe to repeat, ``read_tool_output`` and the policy get 3 attempts and the catalogue
5, for infrastructure failures only (a tool's own error is data, not an activity failure).

A Run whose fleet runs worker roles in separate processes (``roles_apart``: the fleet's
workflows-role workers say so, see ``fleet_roles_apart``; a client may say so too)
schedules each activity on the task queue of its worker role (``ACTIVITY_ROLES``): the
model call on ``<queue>-model``, every tool, policy, catalogue, read-back and MCP search on
``<queue>-tools``, where ``<queue>`` is the Run's own task queue (the workflows role's).
Any other Run schedules every activity on its own queue: the SDK dispatches an activity
eagerly (in the workflow task's completion, no matching round trip) only there, and a
worker of role ``all`` or ``workflows`` registers every activity. Workflow workers reach MCP
servers too: the local ``psych.mcp.list_tools`` runs where the workflow task does.

A code tool registered quick and safe to repeat (its catalogue entry has ``local_seconds``)
runs as a local activity too, on a Run on one queue (``runs_local``): each attempt's tool
bounded by ``local_seconds`` (the permits check before it by its own bound), retried as
any tool safe to repeat, its outcome by ``local_bytes``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        A2A_CANCEL,
        A2A_CARDS,
        A2A_POLL,
        ACTIVITY_ROLES,
        MCP_AUTHORIZE,
        MCP_LIST_TOOLS,
        MCP_SEARCH_TOOLS,
        MODEL_CALL,
        MODEL_COMPACT,
        POLICY_DECIDE,
        TOOL_A2A,
        TOOL_CATALOG,
        TOOL_FINISH_EXTERNAL,
        TOOL_MCP,
        TOOL_READ_OUTPUT,
        TOOL_RUN_CODE,
        TOOL_SEND_HTTP,
        TOOL_STORE_RESULT,
        VERSION_PUBLISH,
        WORKFLOWS_ROLE,
        A2aCancelInput,
        A2aCancelled,
        A2aCards,
        A2aCardsInput,
        A2aPollInput,
        A2aToolCall,
        CatalogEntry,
        CatalogInput,
        CodeToolCall,
        CompactInput,
        CompactResult,
        ErrorType,
        ExternalResultInput,
        HttpToolCall,
        McpAuthorized,
        McpAuthorizeInput,
        McpCatalog,
        McpCatalogInput,
        McpSearchInput,
        McpSearchResult,
        McpToolCall,
        ModelCallInput,
        ModelCallResult,
        PolicyDecision,
        PolicyInput,
        ReadOutputInput,
        SlimCodeToolCall,
        SlimHttpToolCall,
        SlimModelCallResult,
        SlimToolOutcome,
        StoreResultInput,
        ToolCatalog,
        ToolOutcome,
        VersionPublishInput,
        full_model_result,
        full_outcome,
        role_task_queue,
        slim_code_call,
        slim_http_call,
        slim_model_input,
    )
    from psych_runtime.specs import PERMITS_ANSWER_SECONDS, Version
    from psych_runtime.workflows.contract._contract import RunInput
    from psych_runtime.workflows.kernel._model_lost import MODEL_LOST_AFTER, model_lost_after

_R = TypeVar("_R")

ROLES_APART_EXTERN = "psych_runtime.roles_apart"
"""The extern function a workflows-role worker of a fleet running roles apart registers
(``workers/fleet/_roles.py``): its presence, not its value, says so."""
ROLES_APART_PATCH = "psych-roles-apart"
"""The patch marker that records, at a Run's start, that its fleet runs roles apart. It
records a fact, not a code change, so unlike other patches it is never deprecated."""


def fleet_roles_apart() -> bool:
    """Whether the fleet running this Run runs worker roles apart, decided once at the
    Run's start and recorded in its history.

    The worker running the first workflow task knows (``ROLES_APART_EXTERN``); when it
    says yes, the answer is recorded as the patch marker ``ROLES_APART_PATCH``. Replayed,
    the marker alone decides, whichever worker replays: a history without it (every
    history written before this existed, and every Run of a fleet on one queue) keeps its
    activities on the Run's own queue. Call it exactly once, before the Run schedules
    anything.
    """
    if workflow.unsafe.is_replaying():
        # A read on replay: True only when the first task recorded the marker.
        return workflow.patched("psych-roles-apart")
    if ROLES_APART_EXTERN not in workflow.extern_functions():
        return False
    return workflow.patched("psych-roles-apart")


SAFE_TOOL_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
"""Infrastructure retries (a worker died, a timeout) of tools that are safe to repeat."""
ONCE = RetryPolicy(maximum_attempts=1)
"""Model calls (the workflow counts retries) and tools not safe to repeat (never twice)."""


@dataclass(frozen=True)
class Options:
    """How one activity is scheduled."""

    start_to_close: timedelta
    retry: RetryPolicy
    heartbeat: timedelta | None = None


OPTIONS: dict[str, Options] = {
    TOOL_CATALOG: Options(
        timedelta(seconds=60),
        RetryPolicy(maximum_attempts=5, non_retryable_error_types=[ErrorType.TOOL_NOT_REGISTERED]),
    ),
    MODEL_CALL: Options(timedelta(minutes=10), ONCE, heartbeat=MODEL_LOST_AFTER),
    # The summariser is a model call like any other: once, heartbeating while it streams,
    # its answer reported through the client through an outage (MODEL_LOST_AFTER).
    MODEL_COMPACT: Options(timedelta(minutes=10), ONCE, heartbeat=MODEL_LOST_AFTER),
    POLICY_DECIDE: Options(timedelta(seconds=30), SAFE_TOOL_RETRY),
    TOOL_READ_OUTPUT: Options(timedelta(seconds=60), SAFE_TOOL_RETRY),
    # Storing a blob (and a message) under its content's hash: safe to repeat.
    TOOL_STORE_RESULT: Options(timedelta(seconds=60), SAFE_TOOL_RETRY),
    # Post hooks (10 s each, heartbeating) on a payload, then one store: a rewrite run
    # twice after a worker's crash gives the same result.
    TOOL_FINISH_EXTERNAL: Options(
        timedelta(minutes=2), SAFE_TOOL_RETRY, heartbeat=timedelta(seconds=30)
    ),
    # An HTTP tool's own timeout plus this margin bounds its activity.
    TOOL_SEND_HTTP: Options(timedelta(seconds=30), ONCE, heartbeat=timedelta(seconds=10)),
    TOOL_RUN_CODE: Options(timedelta(minutes=10), ONCE, heartbeat=timedelta(seconds=10)),
    # The worker bounds an MCP call by its own call timeout, well inside this.
    TOOL_MCP: Options(timedelta(minutes=10), ONCE, heartbeat=timedelta(seconds=10)),
    MCP_SEARCH_TOOLS: Options(timedelta(seconds=60), SAFE_TOOL_RETRY),
    # One token request; a failed exchange is an answer (the Run asks the person again),
    # so these retries are for the worker's own failures (a worker lost mid-exchange).
    MCP_AUTHORIZE: Options(timedelta(seconds=60), SAFE_TOOL_RETRY),
    # Local, like the MCP catalogue: an unreachable peer is data in its result. Each card
    # fetch is bounded by the worker's card timeout (10 s by default), all in parallel.
    A2A_CARDS: Options(timedelta(seconds=60), SAFE_TOOL_RETRY),
    # The worker bounds a peer message by its call timeout (60 s) plus its hold (5 s),
    # inside this; never retried (``safe_to_repeat`` is False).
    TOOL_A2A: Options(timedelta(minutes=5), ONCE, heartbeat=timedelta(seconds=10)),
    # A read of the peer's task (GetTask): safe to repeat.
    A2A_POLL: Options(timedelta(minutes=2), SAFE_TOOL_RETRY, heartbeat=timedelta(seconds=10)),
    # CancelTask: a peer's refusal or error is data in the result; these retries are for a
    # worker lost mid-request (asking a task to cancel twice is harmless), a few only.
    A2A_CANCEL: Options(timedelta(minutes=2), SAFE_TOOL_RETRY),
    # Local: an unreachable server is data in its result (retries: the worker's failures).
    # 60 s: permits (20 s), then 8 s + 10 s a server (docs/decisions/activities.md).
    MCP_LIST_TOOLS: Options(timedelta(seconds=60), SAFE_TOOL_RETRY),
    # Publishing is idempotent per hash, so infrastructure failures are retried.
    VERSION_PUBLISH: Options(timedelta(seconds=30), SAFE_TOOL_RETRY),
}
"""Per activity name; a tool's retry policy is chosen per call (``tool_retry``)."""

MODEL_SILENCE_IN_OPTIONS = timedelta(seconds=300)
"""The silence a model call's 10 minutes (``OPTIONS``) leave room for: the default
``stream_idle_seconds``. A longer idle limit lengthens the call's bound by the difference
(``model_call_time``)."""
LONGEST_RUN = timedelta(days=1, minutes=10)
"""Longer than any Run's deadline (``deadline_seconds`` is at most a day) and its grace:
the bound of a model call whose idle limit is off, which the Run's deadline bounds first."""


def model_call_time(stream_idle_seconds: float) -> timedelta:
    """The start-to-close timeout of a model call (or a summariser's) whose silences may
    last ``stream_idle_seconds`` (0: no idle limit).

    At most 10 minutes, with room for the default idle limit, would end a call before a
    longer limit the Spec sets (it may be up to an hour, for a model that thinks long before
    its first token) as a timeout, and a limit of 0 would be 10 minutes, not off. Not
    compared on replay (a timeout is not), so histories recorded with 10 minutes replay.
    """
    base = OPTIONS[MODEL_CALL].start_to_close
    if stream_idle_seconds <= 0:
        return LONGEST_RUN
    idle = timedelta(seconds=stream_idle_seconds)
    return base + max(idle - MODEL_SILENCE_IN_OPTIONS, timedelta(0))


def task_queue_for(name: str) -> str | None:
    """The task queue activity ``name`` is scheduled on (None: the Run's own)."""
    role = ACTIVITY_ROLES[name]
    if role == WORKFLOWS_ROLE:
        return None
    if not run_input().roles_apart:
        return None
    return role_task_queue(workflow.info().task_queue, role)


def run_input() -> RunInput:
    """The input of the Run whose workflow code is running (``RunBase._input``).

    Raises:
        RuntimeError: the running workflow is not a Run with a valid input (a Run whose
            input did not parse fails before it schedules anything).
    """
    found = getattr(workflow.instance(), "_input", None)
    if not isinstance(found, RunInput):
        raise RuntimeError(f"workflow {workflow.info().workflow_type} has no RunInput")
    return found


def tool_retry(safe_to_repeat: bool) -> RetryPolicy:
    """A tool safe to repeat gets infrastructure retries; any other runs at most once."""
    return SAFE_TOOL_RETRY if safe_to_repeat else ONCE


async def _execute(
    name: str,
    input: Any,
    result_type: type[_R],
    *,
    summary: str | None,
    retry: RetryPolicy | None = None,
    extra_time: timedelta = timedelta(0),
    heartbeat: timedelta | None = None,
    start_to_close: timedelta | None = None,
) -> _R:
    """Schedule activity ``name`` with its options from ``OPTIONS`` (``start_to_close`` and
    ``heartbeat`` override its timeouts; no ``summary``: none in the schedule command)."""
    options = OPTIONS[name]
    result: _R = await workflow.execute_activity(
        name,
        input,
        result_type=result_type,
        task_queue=task_queue_for(name),
        start_to_close_timeout=(start_to_close or options.start_to_close) + extra_time,
        heartbeat_timeout=heartbeat or options.heartbeat,
        retry_policy=retry or options.retry,
        summary=summary,
    )
    return result


async def _execute_local(
    name: str,
    input: Any,
    result_type: type[_R],
    *,
    summary: str | None,
    start_to_close: timedelta | None = None,
    retry: RetryPolicy | None = None,
) -> _R:
    """Run activity ``name`` as a local activity, with its options from ``OPTIONS``
    (``start_to_close`` and ``retry`` override them; no ``summary``: none in its marker)."""
    options = OPTIONS[name]
    result: _R = await workflow.execute_local_activity(
        name,
        input,
        result_type=result_type,
        start_to_close_timeout=start_to_close or options.start_to_close,
        retry_policy=retry or options.retry,
        summary=summary,
    )
    return result


def runs_local(entry: CatalogEntry) -> bool:
    """Whether a call of this catalogue entry runs as a local activity: a code tool
    registered quick and safe to repeat, on a Run whose tool calls stay on its own queue (a
    Run with its roles apart keeps them on the tools role)."""
    return (
        entry.kind == "code"
        and entry.local_seconds is not None
        and entry.safe_to_repeat
        and task_queue_for(TOOL_RUN_CODE) is None
    )


async def resolve_catalog(input: CatalogInput) -> ToolCatalog:
    """``psych.tool.catalog``: what the Run offers, with each tool's fixed policy.

    A Run on one queue resolves it as a local activity, on the worker running its
    workflow task (which registers every activity): one marker event in history and no
    task of its own, instead of an activity's three events and the workflow task that
    follows them. A Run dispatched ``roles_apart`` schedules it on the tools queue, whose
    workers have the registry.
    """
    if task_queue_for(TOOL_CATALOG) is None:
        return await _execute_local(TOOL_CATALOG, input, ToolCatalog, summary="resolve tools")
    return await _execute(TOOL_CATALOG, input, ToolCatalog, summary="resolve tools")


async def list_mcp_tools(input: McpCatalogInput) -> McpCatalog:
    """``psych.mcp.list_tools``, as a local activity: this turn's MCP catalogue.

    Local, because it runs at every turn boundary: its result is one marker event in
    history (a few bytes when the catalogue is unchanged) instead of an activity's three
    events and a workflow task of its own.
    """
    return await _execute_local(
        MCP_LIST_TOOLS, input, McpCatalog, summary=f"MCP tools, turn {input.turn}"
    )


async def fetch_cards(input: A2aCardsInput) -> A2aCards:
    """``psych.a2a.cards``, as a local activity: this turn's A2A peer skills (one marker in
    history; only the hash and statuses when nothing changed)."""
    return await _execute_local(A2A_CARDS, input, A2aCards, summary=f"A2A cards, turn {input.turn}")


async def poll_a2a(input: A2aPollInput, *, summary: str) -> ToolOutcome:
    """``psych.a2a.poll``: one read of a peer task left working (``wait`` while it is)."""
    return await _execute(A2A_POLL, input, ToolOutcome, summary=summary)


async def cancel_a2a(input: A2aCancelInput, *, summary: str) -> A2aCancelled:
    """``psych.a2a.cancel``: ask the peer to cancel a task the Run no longer waits on."""
    return await _execute(A2A_CANCEL, input, A2aCancelled, summary=summary)


async def authorize_mcp(input: McpAuthorizeInput) -> McpAuthorized:
    """``psych.mcp.authorize``: exchange the code a person's consent brought for a token."""
    return await _execute(MCP_AUTHORIZE, input, McpAuthorized, summary=f"authorize {input.id}")


async def search_mcp_tools(input: McpSearchInput, *, summary: str) -> McpSearchResult:
    """``psych.mcp.search_tools``: the built-in ``search_mcp_tools``."""
    return await _execute(MCP_SEARCH_TOOLS, input, McpSearchResult, summary=summary)


async def complete(call: ModelCallInput) -> ModelCallResult:
    """``psych.model.call``: one model call, once (the Run owns retries), sent slim and its
    result completed here with what the workflow sent."""
    # No summary: the activity type and its input name the model and the turn, and a
    # summary is one more payload per call in history and in every payload pass.
    answer = await _execute(
        MODEL_CALL,
        slim_model_input(call, workflow.info().workflow_id),
        SlimModelCallResult,
        summary=None,
        start_to_close=model_call_time(call.stream_idle_seconds),
        heartbeat=model_lost_after(),
    )
    return full_model_result(answer, call)


async def compact(input: CompactInput) -> CompactResult:
    """``psych.model.compact``: the summariser call of compaction, once (a failure leaves
    the Run uncompacted until the next trigger)."""
    summary = f"compact with {input.model}, after turn {input.turn}"
    time = model_call_time(input.stream_idle_seconds)
    return await _execute(
        MODEL_COMPACT,
        input,
        CompactResult,
        summary=summary,
        start_to_close=time,
        heartbeat=model_lost_after(),
    )


async def decide(input: PolicyInput) -> PolicyDecision:
    """``psych.policy.decide``: the Policy's word on one call (allow, deny or ask)."""
    summary = f"policy for {input.tool.name}"
    return await _execute(POLICY_DECIDE, input, PolicyDecision, summary=summary)


async def read_output(input: ReadOutputInput, *, summary: str) -> ToolOutcome:
    """``psych.tool.read_output``: a slice of a large result stored whole."""
    return await _execute(TOOL_READ_OUTPUT, input, ToolOutcome, summary=summary)


async def store_result(input: StoreResultInput, *, summary: str) -> ToolOutcome:
    """``psych.tool.store_result``: a result the workflow made (a child's answer), stored."""
    return await _execute(TOOL_STORE_RESULT, input, ToolOutcome, summary=summary)


async def finish_external(input: ExternalResultInput, *, summary: str) -> ToolOutcome:
    """``psych.tool.finish_external``: an external wait's payload through the call's post
    hooks, stored."""
    return await _execute(TOOL_FINISH_EXTERNAL, input, ToolOutcome, summary=summary)


LOCAL_BATCH_BYTES = 2 * 1024 * 1024
"""What one batch's local outcomes may hold in all: their markers share a workflow task
completion, which gRPC caps at 4 MB (16 results of 300 KB failed a Run, GrpcMessageTooLarge).
Each call gets an equal share (``local_bytes``); one over it runs again as an activity."""


LOCAL_ROOM = timedelta(seconds=PERMITS_ANSWER_SECONDS + 1)
"""What a local call's bound adds to its tool's ``local_seconds`` (which the activity gives
the tool itself): the tenant's permits, asked first, answer within
``PERMITS_ANSWER_SECONDS`` or fail the attempt, then the outcome is stored."""


async def call_tool(
    input: HttpToolCall | CodeToolCall | McpToolCall | A2aToolCall,
    entry: CatalogEntry,
    *,
    summary: str,
    batch: int = 1,
) -> ToolOutcome:
    """``psych.tool.send_http`` (bounded by the HTTP tool's own timeout too),
    ``psych.tool.run_code`` (both slim; a local activity when ``runs_local``, with its share
    of ``LOCAL_BATCH_BYTES`` among the ``batch`` calls), ``psych.tool.mcp`` or
    ``psych.tool.a2a``: one tool call, retried only when it is safe to repeat."""
    retry, heartbeat = tool_retry(entry.safe_to_repeat), _heartbeat(entry)
    if isinstance(input, McpToolCall):
        return await _execute(
            TOOL_MCP, input, ToolOutcome, summary=summary, retry=retry, heartbeat=heartbeat
        )
    if isinstance(input, A2aToolCall):
        return await _execute(
            TOOL_A2A, input, ToolOutcome, summary=summary, retry=retry, heartbeat=heartbeat
        )
    workflow_id = workflow.info().workflow_id
    if isinstance(input, HttpToolCall):
        slim: SlimCodeToolCall | SlimHttpToolCall = slim_http_call(input, workflow_id)
        name, extra = TOOL_SEND_HTTP, timedelta(seconds=input.tool.timeout_seconds)
    else:
        slim, name, extra = slim_code_call(input, workflow_id), TOOL_RUN_CODE, timedelta(0)
        if entry.local_seconds is not None and runs_local(entry):
            share = LOCAL_BATCH_BYTES // max(batch, 1)
            # The activity bounds the tool by local_seconds; its own bound leaves the
            # permits check and storing the outcome room (``LOCAL_ROOM``).
            bounds = {"local_bytes": share, "local_seconds": entry.local_seconds}
            try:
                local = await _execute_local(
                    name,
                    slim.model_copy(update=bounds),
                    SlimToolOutcome,
                    summary=None,
                    start_to_close=timedelta(seconds=entry.local_seconds) + LOCAL_ROOM,
                    retry=retry,
                )
                return full_outcome(local, input.call_id)
            except FailureError as err:
                if not _runs_as_activity(err):
                    raise
    # No summary: the activity type and its input name the tool.
    outcome = await _execute(
        name,
        slim,
        SlimToolOutcome,
        summary=None,
        retry=retry,
        extra_time=extra,
        heartbeat=heartbeat,
    )
    return full_outcome(outcome, input.call_id)


def _runs_as_activity(err: FailureError) -> bool:
    """Whether a local call failed ``LocalResultTooLarge`` or ``LocalCallHooked`` (live its
    ``ActivityError``'s cause, replayed the ``ApplicationError`` itself)."""
    cause = err.__cause__ if isinstance(err, ActivityError) else err
    kinds = (ErrorType.LOCAL_RESULT_TOO_LARGE, ErrorType.LOCAL_CALL_HOOKED)
    return isinstance(cause, ApplicationError) and cause.type in kinds


def _heartbeat(entry: CatalogEntry) -> timedelta | None:
    """The worker's heartbeat timeout for this tool (sized for the outage it survives)."""
    seconds = entry.heartbeat_timeout_seconds
    return timedelta(seconds=seconds) if seconds is not None else None


async def publish_version(input: VersionPublishInput, *, summary: str) -> Version:
    """``psych.version.publish``: a composed Spec (a spawned child's) stored as a Version."""
    return await _execute(VERSION_PUBLISH, input, Version, summary=summary)
