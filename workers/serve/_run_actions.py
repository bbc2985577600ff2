"""Acting on a Run: approve, deny, answer, complete (each answers the ResumeResult), abort
and steer (202: the Run takes them in its own time). One PsychClient call each."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, which
# name the closure's `Caller`, at definition time.
from collections.abc import Awaitable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from psych_runtime.specs import Scope
from psych_runtime.workers._bounded import bounded as within
from psych_runtime.workers.serve._context import ApiContext
from psych_runtime.workers.serve._run_routes import tenant_run

T = TypeVar("T")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DecisionBody(_Body):
    """Approve or deny a pending tool call."""

    call_id: str = Field(min_length=1)
    note: str | None = None


class AnswerBody(_Body):
    """Answer a pending question."""

    call_id: str = Field(min_length=1)
    text: str


class CompleteBody(_Body):
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
    async def approve(run_id: str, body: DecisionBody, scope: Caller) -> dict[str, Any]:
        """Approve a pending tool call; it runs."""
        result = await bounded(
            client.approve(tenant_run(run_id, scope), body.call_id, scope=scope, note=body.note)
        )
        return result.model_dump(mode="json")

    @router.post("/deny")
    async def deny(run_id: str, body: DecisionBody, scope: Caller) -> dict[str, Any]:
        """Reject a pending tool call; the model is told (with the note)."""
        result = await bounded(
            client.deny(tenant_run(run_id, scope), body.call_id, scope=scope, note=body.note)
        )
        return result.model_dump(mode="json")

    @router.post("/answer")
    async def answer(run_id: str, body: AnswerBody, scope: Caller) -> dict[str, Any]:
        """Answer a pending ``ask_question`` call."""
        result = await bounded(
            client.answer(tenant_run(run_id, scope), body.call_id, body.text, scope=scope)
        )
        return result.model_dump(mode="json")

    @router.post("/complete")
    async def complete(run_id: str, body: CompleteBody, scope: Caller) -> dict[str, Any]:
        """Complete an external wait by its token."""
        result = await bounded(
            client.complete(tenant_run(run_id, scope), body.token, body.payload, scope=scope)
        )
        return result.model_dump(mode="json")

    @router.post("/abort", status_code=202)
    async def abort(run_id: str, body: AbortBody, scope: Caller) -> JSONResponse:
        """Abort the Run (it settles once non-interruptible calls finish)."""
        reason = body.reason or f"aborted by {scope.principal or 'request'}"
        await bounded(client.abort(tenant_run(run_id, scope), scope=scope, reason=reason))
        return JSONResponse({}, status_code=202)

    @router.post("/steer", status_code=202)
    async def steer(run_id: str, body: SteerBody, scope: Caller) -> JSONResponse:
        """Give the Run's model a message."""
        await bounded(
            client.steer(tenant_run(run_id, scope), body.message, scope=scope, mode=body.mode)
        )
        return JSONResponse({}, status_code=202)

    return router
