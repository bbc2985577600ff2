"""Acting on a Run: approve, deny, answer, complete (each answers the ResumeResult), abort
and steer (202: the Run takes them in its own time). One PsychClient call each; an
``Idempotency-Key`` header is its ``idempotency_key`` (applied at most once per key)."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, which
# name the closure's `Caller`, at definition time.
from collections.abc import Awaitable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Header
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from psych_runtime.specs import Scope
from psych_runtime.workers._bounded import bounded as within
from psych_runtime.workers.serve._context import ApiContext
from psych_runtime.workers.serve._run_routes import tenant_run
from psych_runtime.workflows import IDEMPOTENCY_KEY_MAX

T = TypeVar("T")

Key = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX,
        description=(
            "The caller's name for this request: sent again under the same key (after a "
            "503, a lost answer), it is applied at most once and answers the first "
            "outcome, even once the Run has settled."
        ),
    ),
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Resume(_Body):
    held_by: str | None = Field(default=None, min_length=1)
    """The Run holding the item (its ``run`` in the state's pending list), needed only
    when its id is pending in more than one Run."""


class DecisionBody(_Resume):
    """Approve or deny a pending tool call."""

    call_id: str = Field(min_length=1)
    note: str | None = None


class AnswerBody(_Resume):
    """Answer a pending question."""

    call_id: str = Field(min_length=1)
    text: str


class CompleteBody(_Resume):
    """Complete an external wait: ``payload`` becomes the waiting tool's result."""

    token: str = Field(min_length=1)
    payload: Any = None


class AbortBody(_Body):
    """Abort the Run."""

    reason: str | None = Field(default=None, min_length=1)


class SteerBody(_Body):
    """A message for the Run's model: into this turn, after it, or for the next Run."""

    message: str = Field(min_length=1)
    mode: Literal["steer", "follow_up", "next_run"] = "steer"


def action_routes(context: ApiContext) -> APIRouter:
    """The routes that act on a Run."""
    router = APIRouter(prefix="/v1/runs/{run_id}", tags=["actions"])
    Caller = Annotated[Scope, Depends(context.caller)]
    client = context.client

    async def bounded(call: Awaitable[T]) -> T:
        """``call``, waiting for the Run's worker as long as a query does (then 503)."""
        return await within(call, context.settings.query_timeout_seconds)

    @router.post("/approve")
    async def approve(
        run_id: str, body: DecisionBody, scope: Caller, key: Key = None
    ) -> dict[str, Any]:
        """Approve a pending tool call; it runs."""
        return await decide(run_id, body, scope, key, approved=True)

    @router.post("/deny")
    async def deny(
        run_id: str, body: DecisionBody, scope: Caller, key: Key = None
    ) -> dict[str, Any]:
        """Reject a pending tool call; the model is told (with the note)."""
        return await decide(run_id, body, scope, key, approved=False)

    async def decide(
        run_id: str, body: DecisionBody, scope: Scope, key: str | None, *, approved: bool
    ) -> dict[str, Any]:
        run = tenant_run(run_id, scope)
        send = client.approve if approved else client.deny
        result = await bounded(
            send(
                run,
                body.call_id,
                scope=scope,
                note=body.note,
                idempotency_key=key,
                held_by=body.held_by,
                update_timeout=context.query_timeout,
            )
        )
        return result.model_dump(mode="json")

    @router.post("/answer")
    async def answer(
        run_id: str, body: AnswerBody, scope: Caller, key: Key = None
    ) -> dict[str, Any]:
        """Answer a pending ``ask_question`` call."""
        run = tenant_run(run_id, scope)
        result = await bounded(
            client.answer(
                run,
                body.call_id,
                body.text,
                scope=scope,
                idempotency_key=key,
                held_by=body.held_by,
                update_timeout=context.query_timeout,
            )
        )
        return result.model_dump(mode="json")

    @router.post("/complete")
    async def complete(
        run_id: str, body: CompleteBody, scope: Caller, key: Key = None
    ) -> dict[str, Any]:
        """Complete an external wait by its token."""
        run = tenant_run(run_id, scope)
        result = await bounded(
            client.complete(
                run,
                body.token,
                body.payload,
                scope=scope,
                idempotency_key=key,
                held_by=body.held_by,
                update_timeout=context.query_timeout,
            )
        )
        return result.model_dump(mode="json")

    @router.post("/abort", status_code=202)
    async def abort(run_id: str, body: AbortBody, scope: Caller, key: Key = None) -> JSONResponse:
        """Abort the Run (it settles once non-interruptible calls finish)."""
        reason = body.reason or f"aborted by {scope.principal or 'request'}"
        run = tenant_run(run_id, scope)
        await bounded(
            client.abort(
                run,
                scope=scope,
                reason=reason,
                idempotency_key=key,
                update_timeout=context.query_timeout,
            )
        )
        return JSONResponse({}, status_code=202)

    @router.post("/steer", status_code=202)
    async def steer(run_id: str, body: SteerBody, scope: Caller, key: Key = None) -> JSONResponse:
        """Give the Run's model a message."""
        run = tenant_run(run_id, scope)
        await bounded(
            client.steer(
                run,
                body.message,
                scope=scope,
                mode=body.mode,
                idempotency_key=key,
                update_timeout=context.query_timeout,
            )
        )
        return JSONResponse({}, status_code=202)

    return router
