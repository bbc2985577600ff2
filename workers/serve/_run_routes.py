"""Dispatching and reading Runs: ``/v1/runs`` and what each Run shows.

A Run is named by its workflow id (``psych-<tenant>-<id>``, what dispatch answers as
``run_id``). Another tenant's Run is answered exactly as a missing one (404 ``no Run
<id>``), before anything of it is read.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, which
# name the closure's `Caller`, at definition time.
import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from sse_starlette import EventSourceResponse, ServerSentEvent
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import NotFound, PsychError, Scope, Version, parse_spec
from psych_runtime.workers.console import read_transcript, turns_without_calls
from psych_runtime.workers.serve._auth import Caller as Who
from psych_runtime.workers.serve._context import ApiContext
from psych_runtime.workers.serve._events import (
    EventIds,
    EventPosition,
    parse_event_id,
    run_events,
)
from psych_runtime.workers.serve._expiry import CredentialExpired, until_expiry
from psych_runtime.workers.serve._problems import ApiProblem, no_run, problem, problem_for
from psych_runtime.workflows import (
    IDEMPOTENCY_KEY_MAX,
    DeltasDropped,
    Record,
    RunStatus,
    RunSummary,
    TokenDelta,
    UnknownPosition,
    describe_within,
    parse_workflow_id,
)

MAX_LIST = 1000
"""The most Runs one list answers."""
MAX_CURSOR = 4096
"""The longest cursor a list takes (those it answers are a few hundred characters)."""
MAX_INPUT_CALLS = 20
"""Most model calls whose inputs one report request reads (``?inputs=true``): each call's
messages repeat the conversation before it."""

_SUMMARIES = TypeAdapter(list[RunSummary])
_RECORDS = TypeAdapter(list[Record])


class DispatchBody(BaseModel):
    """``POST /v1/runs``: a published Version's hash or a Spec, and the user's input."""

    model_config = ConfigDict(extra="forbid")

    version: str | None = None
    """The hash of a published Version."""
    spec: dict[str, Any] | None = None
    """A Spec to publish and run (instead of ``version``)."""
    input: str | list[str] = Field(min_length=1)
    """The user's message, or several."""
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=IDEMPOTENCY_KEY_MAX)
    """The same tenant and key reach the same Run."""

    @model_validator(mode="after")
    def _one_source(self) -> "DispatchBody":
        if (self.version is None) == (self.spec is None):
            raise ValueError("give exactly one of version (a Version hash) or spec")
        return self


DispatchKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX,
        description=(
            "The caller's name for this dispatch, as the body's idempotency_key (give "
            "either, or both alike): the same tenant and key reach the same Run."
        ),
    ),
]


def tenant_run(run_id: str, scope: Scope) -> str:
    """``run_id`` when it is one of the caller's tenant's Runs.

    Raises:
        ApiProblem: 404 ``no Run <id>`` for another tenant's Run or a malformed id alike.
    """
    try:
        tenant, _ = parse_workflow_id(run_id)
    except NotFound:
        tenant = None
    if tenant != scope.tenant:
        raise ApiProblem(404, no_run(run_id), "not-found")
    return run_id


def run_routes(context: ApiContext) -> APIRouter:
    """The routes that dispatch, list and read Runs."""
    router = APIRouter(prefix="/v1/runs", tags=["runs"])
    Caller = Annotated[Scope, Depends(context.caller)]
    Identity = Annotated[Who, Depends(context.identity)]
    client = context.client

    @router.post("", status_code=201)
    async def dispatch(body: DispatchBody, who: Identity, key: DispatchKey = None) -> JSONResponse:
        """Start a Run; answers ``{"run_id": <workflow id>, ...}``. A Spec sent inline is
        published first, so only a publisher's credential may send one (403 otherwise).
        The ``Idempotency-Key`` header is the body's ``idempotency_key``."""
        if None not in (key, body.idempotency_key) and key != body.idempotency_key:
            raise ApiProblem(
                422,
                "the Idempotency-Key header and the body's idempotency_key name two "
                "dispatches: give one of them, or both alike",
                "invalid-request",
            )
        idempotency_key = body.idempotency_key if key is None else key
        spec: Version | str | None = body.version
        scope = who.scope
        if body.spec is not None:
            scope = who.publishing()
            parsed = parse_spec(body.spec, source="spec")
            # The version store is files: written off the event loop, which serves streams.
            spec = await asyncio.to_thread(client.publish, parsed)
        assert spec is not None
        handle = await client.dispatch(
            spec, body.input, scope=scope, idempotency_key=idempotency_key
        )
        return JSONResponse(
            {
                "run_id": handle.workflow_id,
                "tenant": handle.tenant,
                "agent": handle.agent,
                "version_hash": handle.version_hash,
            },
            status_code=201,
        )

    @router.get("")
    async def list_runs(
        scope: Caller,
        agent: str | None = None,
        status: RunStatus | None = None,
        waiting: bool = False,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
        cursor: Annotated[str | None, Query(min_length=1, max_length=MAX_CURSOR)] = None,
    ) -> dict[str, Any]:
        """The tenant's Runs, newest first; ``waiting=true``: suspended ones with what each
        waits for. ``next_cursor`` (null on the last page), sent back as ``cursor`` with
        the same filters, reads the next page; a cursor of another tenant's listing, or of
        other filters, is a 422 ``bad-cursor``."""
        if waiting and status not in (None, RunStatus.SUSPENDED):
            raise ApiProblem(422, f"waiting=true lists suspended Runs, not status={status}")
        page = await client.list_page(
            scope=scope, agent=agent, status=status, suspended=waiting, limit=limit, cursor=cursor
        )
        return {
            "runs": _SUMMARIES.dump_python(list(page.runs), mode="json"),
            "next_cursor": page.next_cursor,
        }

    @router.get("/{run_id}")
    async def status(run_id: str, scope: Caller) -> dict[str, Any]:
        """The Run's state (RunState)."""
        state = await client.status(
            tenant_run(run_id, scope), scope=scope, query_timeout=context.query_timeout
        )
        return state.model_dump(mode="json")

    @router.get("/{run_id}/report")
    async def report(
        run_id: str,
        scope: Caller,
        inputs: bool = False,
        turn: Annotated[list[int] | None, Query()] = None,
    ) -> dict[str, Any]:
        """The Run's report (RunReport); ``inputs=true``: with each model call's system
        prompt as sent and messages (``turn``, repeatable: only those turns' calls), read
        from the workers' blob store."""
        if turn and not inputs:
            raise ApiProblem(422, "turn selects the model calls whose inputs are read: inputs=true")
        built = await client.report(
            tenant_run(run_id, scope),
            scope=scope,
            query_timeout=context.query_timeout,
            inputs=set(turn) if turn else inputs,
            # Each call's messages repeat the conversation before it: all of a long Run's
            # inputs at once grow with the square of its length, built in this process.
            max_inputs=MAX_INPUT_CALLS,
        )
        missing = None if not turn else turns_without_calls(built, turn)
        if missing is not None:
            raise ApiProblem(422, f"turn {missing}")
        return built.model_dump(mode="json")

    @router.get("/{run_id}/transcript")
    async def transcript(run_id: str, scope: Caller) -> dict[str, Any]:
        """The conversation as the model saw it (what ``psych report --transcript`` prints):
        ``entries`` are its messages in order; a workflow's are in its ``steps``."""
        built = await read_transcript(
            client, tenant_run(run_id, scope), scope=scope, query_timeout=context.query_timeout
        )
        return transcript_json(TypeAdapter(type(built)).dump_python(built, mode="json"))

    @router.get("/{run_id}/records")
    async def records(
        run_id: str, scope: Caller, after: Annotated[int, Query(ge=0)] = 0
    ) -> dict[str, Any]:
        """Records with ``seq > after``; ``next`` is the ``after`` that reads on."""
        page = await client.records(
            tenant_run(run_id, scope),
            scope=scope,
            after=after,
            query_timeout=context.query_timeout,
        )
        last = page.records[-1].seq if page.records else after
        return {"records": _RECORDS.dump_python(list(page.records), mode="json"), "next": last}

    @router.get("/{run_id}/events", response_class=EventSourceResponse)
    async def events(
        run_id: str,
        who: Identity,
        after: str | None = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> EventSourceResponse:
        """Server-Sent Events of the Run: ``record``, ``delta``, ``deltas_dropped``, then
        ``end``; resumable with ``Last-Event-ID`` (or ``?after=``). Opened with a JWT, the
        stream ends when the token does: an ``error`` event with a 401 problem."""
        scope = who.scope
        tenant_run(run_id, scope)
        given = last_event_id if last_event_id is not None else after
        try:
            position = EventPosition() if given is None else parse_event_id(given)
        except ValueError as err:
            raise ApiProblem(422, str(err), "invalid-request") from err
        await _exists(context, run_id)
        stream = _sse(context, run_id, scope, (given, position), who.expires_at)
        return EventSourceResponse(stream, ping=context.settings.keepalive_seconds)

    return router


logger = logging.getLogger(__name__)

STREAM_FAILED = (
    "the server failed while streaming this Run's events (an internal error: its log has "
    "the details); reconnect with the last event id (Last-Event-ID) to resume"
)


async def _exists(context: ApiContext, run_id: str) -> None:
    """Refuse a Run Temporal does not know before the stream starts (a 404, not an event).
    The describe waits the query timeout at most: past it, ``TemporalUnanswered`` (503
    ``temporal``)."""
    handle = context.client.temporal.get_workflow_handle(run_id)
    try:
        await describe_within(handle, run_id, context.query_timeout)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise  # Temporal unreachable or refusing: a 503, which a follower retries
        raise ApiProblem(404, no_run(run_id), "not-found") from err


async def _sse(
    context: ApiContext,
    run_id: str,
    scope: Scope,
    resumed: tuple[str | None, EventPosition],
    expires_at: float | None,
) -> AsyncIterator[ServerSentEvent]:
    given, position = resumed
    ids = EventIds(position)
    items = until_expiry(
        run_events(context.client, run_id, scope=scope, after=position), expires_at
    )
    try:
        async for item in items:
            event: Literal["record", "delta", "deltas_dropped"] = (
                "delta"
                if isinstance(item, TokenDelta)
                else "deltas_dropped"
                if isinstance(item, DeltasDropped)
                else "record"
            )
            yield ServerSentEvent(data=item.model_dump_json(), event=event, id=ids.next_id(item))
    except CredentialExpired as err:  # before PsychError: it is one
        yield _expired(err.expires_at)
        return
    except UnknownPosition as err:  # before PsychError: it is one
        yield _unknown_id(given or str(position), err)
        return
    except (PsychError, RPCError) as err:
        failure = problem_for(err, run_id)
        yield ServerSentEvent(data=bytes(failure.body).decode(), event="error")
        return
    except Exception:
        # As a request's unexpected failure is a 500 problem: the follower is told the
        # stream ended on the server's fault (not that the Run did), the log has why.
        logger.exception("the event stream of %s failed", run_id)
        failure = problem(500, STREAM_FAILED, "internal")
        yield ServerSentEvent(data=bytes(failure.body).decode(), event="error")
        return
    finally:
        await items.aclose()
    yield ServerSentEvent(data=f'{{"last_seq": {ids.position.seq}}}', event="end")


def _expired(expires_at: float) -> ServerSentEvent:
    """The last event of a stream whose token is no longer accepted."""
    failure = problem(
        401,
        "the token this stream was opened with has expired: reconnect with a fresh one "
        "and the last event id (Last-Event-ID) to resume",
        "unauthorized",
        expired_at=expires_at,
    )
    return ServerSentEvent(data=bytes(failure.body).decode(), event="error")


def _unknown_id(given: str, err: UnknownPosition) -> ServerSentEvent:
    """The last event of a stream resumed from an id naming a record the Run has not
    written: known only once a worker answered (the stream waits for one as any does),
    so an event, not the opening's status."""
    failure = problem(
        422,
        f"the event id {given!r} names record {err.after}, which this Run has not written "
        f"(its last is {err.last_seq}): it is no id of this Run's stream. Reconnecting "
        "with it is refused again: open the stream without an id to read the Run from "
        "its start",
        "unknown-event-id",
        last_seq=err.last_seq,
    )
    return ServerSentEvent(data=bytes(failure.body).decode(), event="error")


def transcript_json(data: dict[str, Any]) -> dict[str, Any]:
    """A transcript's data with its ``messages`` named ``entries``, steps' children too."""
    shaped = dict(data)
    shaped["entries"] = shaped.pop("messages", [])
    shaped["steps"] = [
        {**step, "child": None if step.get("child") is None else transcript_json(step["child"])}
        for step in shaped.get("steps", [])
    ]
    return shaped
