"""Errors as ``application/problem+json`` (RFC 9457): ``{type, title, status, detail, ...}``.

The one place the API maps exceptions to statuses: psych's own errors (``NotFound`` 404,
``AccessDenied`` 404 with the same words as a missing Run so another tenant's Run is never
revealed, ``Refused`` 409 with its kind (``TooLarge``: 413), ``ValidationFailed``/
``SpecError`` 422 with every problem, ``BadCursor`` 422 ``bad-cursor``: a listing's cursor
damaged, made for another tenant or other filters, or at a position Temporal cannot read,
``StoreDamaged`` 500: a stored
Version that no longer reads back, ``BlobsUnavailable`` 503: a report's model-call inputs
asked of a server whose blob store does not hold them, ``BlobUnreadable`` 500: one it holds
that does not open, damaged or sealed under other keys), Temporal's
(no worker answered: 503 ``no-worker``; Temporal did not answer a read that needs no
worker, or cancelled it at once, or ended an update with a timeout's status: 503
``temporal``; an update's wait that ran out says how far Temporal, asked then, had it,
``UpdateUnanswered.held``: ``no-worker`` when no worker took or answered it,
``temporal`` when its answer was lost or Temporal held no such update), request
validation (422, each field named),
``NotPermitted`` (403, each tool, server or peer the tenant may not use, as ``problems``),
``PermitsUnavailable`` (503: the tenant permits port failed or did not answer),
``StoreUnavailable`` (503 ``store-unavailable``: a store, the S3 version store say, did not
answer; its message names what was asked and the store's kind, never where it is; a local
store's disk error, ``LocalStoreFailed``, after its errno: a full disk or quota is 507
``store-full``, one that lasts, a read-only or unwritable directory, the server's 500
``store-failed``, any other 503 ``store-unavailable``),
``Unauthorized`` (401; ``IssuerUnavailable``, a JWT whose issuer's keys could not be read,
503 with ``Retry-After``: when they are fetched again) and ``NotPublisher`` (403); anything
else is a 500 ``internal`` problem that says nothing of it (the server logs it). A
``Retry-After`` is sent only where the server knows when (``problem(retry_after=)``).
``problem_of`` says which problem answers an error (the A2A endpoint answers its errors
after it, ``a2a/_errors.py``); ``problem_for`` is its response.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.blobs import LocalStoreFailed
from psych_runtime.specs import (
    AccessDenied,
    BadCursor,
    BlobsUnavailable,
    BlobUnreadable,
    NotFound,
    NotPermitted,
    PermitsUnavailable,
    PsychError,
    Refused,
    SpecError,
    StoreDamaged,
    StoreUnavailable,
    ValidationFailed,
)
from psych_runtime.workers._bounded import NOT_TAKEN_IN_TIME, NotTakenInTime
from psych_runtime.workers.serve._auth import IssuerUnavailable, NotPublisher, Unauthorized
from psych_runtime.workflows import (
    ClosedStateUnanswered,
    RefusalKind,
    TemporalCancelled,
    TemporalUnanswered,
    UpdateEndedByTemporal,
    UpdateUnanswered,
)

PROBLEM_JSON = "application/problem+json"
INTERNAL_DETAIL = "the server failed on this request (an internal error: its log has the details)"
"""The detail of the ``internal`` problem: nothing of the error, which the server logs."""

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request too large",
    415: "Unsupported media type",
    422: "Invalid request",
    500: "Internal error",
    503: "Unavailable",
    507: "Insufficient storage",
}


class ApiProblem(Exception):
    """Raised by a route to answer with a problem of this status."""

    def __init__(self, status: int, detail: str, kind: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind
        self.extra = extra


def problem_type(status: int, kind: str | None = None) -> str:
    """The problem's ``type`` URI: ``urn:psych:problem:<kind or status>``."""
    return f"urn:psych:problem:{kind or status}"


def problem(
    status: int,
    detail: str,
    kind: str | None = None,
    *,
    retry_after: float | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem response; ``retry_after``: seconds after which the request may succeed
    (its ``Retry-After``), when the server knows them."""
    body = {
        "type": problem_type(status, kind),
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        **extra,
    }
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if retry_after is not None:
        # Whole seconds (RFC 9110's delay-seconds), rounded up so a client that waits them
        # is not early, and at least 1: a 0 would ask for the request again at once.
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def no_run(run_id: str) -> str:
    """The detail of a Run the caller may not see: the same whether it exists or not."""
    return f"no Run {run_id}"


def problem_for(err: Exception, run_id: str | None = None) -> JSONResponse:
    """The problem answering ``err`` (``run_id``: the Run the request named, if any).

    Raises:
        Exception: ``err`` itself, when it is none the API answers (``problem_of``).
    """
    found = problem_of(err, run_id)
    if found is None:
        raise err
    return problem(
        found.status, found.detail, found.kind, retry_after=found.retry_after, **found.extra
    )


@dataclass(frozen=True)
class Problem:
    """What a problem response says: its status, ``detail``, kind (its ``type``'s last
    part, ``problem_type``), the seconds of its ``Retry-After``, and its other members."""

    status: int
    detail: str
    kind: str | None = None
    retry_after: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        """Its ``type`` URI."""
        return problem_type(self.status, self.kind)


def problem_of(err: Exception, run_id: str | None = None) -> Problem | None:
    """The problem the API answers ``err`` with (``run_id``: the Run the request named, if
    any); None: ``err`` is none of psych's, Temporal's or the API's own errors, which the
    API answers as an internal error that says nothing of it."""
    match err:
        case ApiProblem():
            return Problem(err.status, err.detail, err.kind, extra=err.extra)
        case IssuerUnavailable():  # before Unauthorized: it is one
            # Not fetched again before then: each token sent meanwhile gets this answer.
            return Problem(503, str(err), "issuer-unavailable", retry_after=err.retry_after)
        case Unauthorized():
            return Problem(401, str(err), "unauthorized")
        case NotPublisher():
            return Problem(403, str(err), "not-publisher")
        case PermitsUnavailable():
            return Problem(503, str(err), "permits-unavailable")
        case LocalStoreFailed() if err.full:
            # It passes once someone frees space, not within a client's retries: 507, which
            # says not to repeat the request of itself (RFC 4918 11.5), unlike a 503.
            return Problem(507, str(err), "store-full")
        case LocalStoreFailed() if err.lasting:
            # Read-only, permission refused, not a directory: the server's to mend, and sent
            # again the request fails again (a 503 would tell the client to retry).
            return Problem(500, str(err), "store-failed")
        case StoreUnavailable():
            # Sent again once the store answers, it may succeed (a 409 would say it cannot).
            return Problem(503, str(err), "store-unavailable")
        case NotPermitted():
            problems = [{"path": p.path, "message": p.message} for p in err.problems]
            return Problem(403, str(err), "not-permitted", extra={"problems": problems})
        case AccessDenied() | NotFound() if run_id is not None:
            return Problem(404, no_run(run_id), "not-found")
        case NotFound():
            return Problem(404, str(err), "not-found")
        case AccessDenied():
            return Problem(404, "not found", "not-found")
        case Refused() if err.kind == RefusalKind.TOO_LARGE:
            # The request itself, not the Run's state: sent again it is refused again.
            return Problem(413, str(err), "too-large", extra={"refusal": err.kind})
        case Refused():
            return Problem(409, str(err), "refused", extra={"refusal": err.kind})
        case ValidationFailed():
            problems = [{"path": p.path, "message": p.message} for p in err.problems]
            return Problem(422, str(err), "invalid-spec", extra={"problems": problems})
        case BlobUnreadable():
            # There, but damaged or sealed under other keys: the server's fault (its store or
            # its key configuration), not a missing Run or blob.
            return Problem(500, str(err), "blob-unreadable")
        case BlobsUnavailable():
            # The server's blob store (none, or not the workers'): sent again, refused again.
            return Problem(503, str(err), "blobs-unavailable")
        case StoreDamaged():
            # Before SpecError: the store's fault, which the caller cannot mend.
            return Problem(500, str(err), "store-damaged")
        case SpecError():
            return Problem(422, str(err), "invalid-spec")
        case BadCursor():
            # The request: another tenant's or other filters' cursor, a damaged one, or one
            # at a position Temporal refuses (while it reads the listing from its start).
            return Problem(422, str(err), "bad-cursor")
        case PsychError():
            return Problem(409, str(err), "conflict")
        case UpdateEndedByTemporal():  # Temporal's timeout status, not a worker's silence
            return ended_update(err)
        case NotTakenInTime() if isinstance(err.__cause__, UpdateUnanswered):
            return unanswered_update(err.__cause__)
        case UpdateUnanswered():
            return unanswered_update(err)
        case NotTakenInTime() | WorkflowUpdateRPCTimeoutOrCancelledError():
            return Problem(
                503,
                f"{NOT_TAKEN_IN_TIME}, or send it again under the same Idempotency-Key",
                "no-worker",
            )
        case WorkflowUpdateFailedError():
            cause = getattr(err.cause, "message", None) or str(err.cause or err)
            return Problem(409, f"the Run did not take it: {cause}", "refused")
        case ClosedStateUnanswered():  # a closed execution's state: its close event says less
            return Problem(503, f"no worker answered for the Run in time; {err.why}", "no-worker")
        case TemporalUnanswered():  # Temporal, not a worker, did not answer in time
            return Problem(503, err.why, "temporal")
        case TemporalCancelled():  # Temporal gave up a read no worker answers, at once
            return Problem(503, err.why, "temporal")
        case RPCError() if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            return Problem(503, "no worker answered for the Run in time", "no-worker")
        case RPCError() if err.status == RPCStatusCode.NOT_FOUND and run_id is not None:
            return Problem(404, no_run(run_id), "not-found")
        case RPCError() if err.status == RPCStatusCode.INVALID_ARGUMENT:
            # The request itself: sending it again cannot help (a 503 says it may).
            too_large = "size exceeds" in err.message.lower()
            return Problem(
                413 if too_large else 422,
                f"Temporal refused the request: {err.message}",
                "too-large" if too_large else "invalid-request",
            )
        case RPCError():
            return Problem(503, f"Temporal refused: {err.message} ({err.status.name})", "temporal")
    return None


_REST_KEY = "under the same Idempotency-Key"


def _held_words(held: str | None, key: str) -> tuple[str, str] | None:
    """The words and kind of an update whose wait ran out, by how far Temporal, asked then,
    had it (``UpdateUnanswered.held``): a worker's silence is ``no-worker``, an answer lost
    or a request Temporal never held ``temporal``; ``key`` says how to send it again safely
    (REST's ``Idempotency-Key``, A2A's ``messageId``). None: Temporal was not asked, or did
    not answer."""
    again = f"or send it again {key}"
    match held:
        case "admitted":
            return (
                "no worker took the request in time (Temporal holds it: none polls the Run's "
                "task queue, or its worker is busy); it may still be applied when one does: "
                f"read the Run before sending it again, {again}",
                "no-worker",
            )
        case "accepted":
            return (
                "the Run's worker took the request but did not answer it in time; it may "
                f"still be applied: read the Run before sending it again, {again}",
                "no-worker",
            )
        case "completed":
            return (
                "the Run's worker answered the request, but its answer did not come back in "
                f"time (Temporal, asked after, has it answered): read the Run, {again} to "
                "learn its outcome",
                "temporal",
            )
        case "not-ready":
            return (
                "Temporal refused the request as not ready (the Run's workflow task that "
                "carried it failed, so it was not applied) and the time ran out before it "
                f"was sent again: send it again {key}",
                "no-worker",
            )
        case "unknown":
            return (
                "Temporal did not answer the request in time and, asked after, holds no such "
                "update (it most likely never received it; no worker is waited for): read "
                f"the Run before sending it again, {again}",
                "temporal",
            )
    return None


def ended_update(err: UpdateEndedByTemporal, key: str = _REST_KEY) -> Problem:
    """The 503 of an update Temporal ended with a timeout's status before the Run answered
    it; ``key``: how to send it again safely (REST's ``Idempotency-Key`` unless given)."""
    detail = f"{err.said}; it may still be applied: read the Run before sending it again, "
    return Problem(503, f"{detail}or send it again {key}", "temporal")


def unanswered_update(err: UpdateUnanswered, key: str = _REST_KEY) -> Problem:
    """The 503 of an update's wait that ran out, saying as much as ``err.held`` knows
    (not asked, or not answered: what ``NotTakenInTime`` says); ``key``: how to send it
    again safely (REST's ``Idempotency-Key`` unless given)."""
    said = _held_words(err.held, key)
    if said is None:
        return Problem(503, f"{NOT_TAKEN_IN_TIME}, or send it again {key}", "no-worker")
    return Problem(503, *said)


def _field(location: tuple[Any, ...]) -> str:
    parts = [str(part) for part in location]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        return f"{where}.{'.'.join(rest)}" if rest else where
    return ".".join(parts)


def _error(item: Any) -> dict[str, str]:
    """One request validation error as ``{field, message}``."""
    location = tuple(item.get("loc", ()))
    if item.get("type") == "json_invalid" and len(location) == 2:
        # FastAPI puts the character the JSON parser stopped at where a field would be.
        why = (item.get("ctx") or {}).get("error")
        message = f"not JSON at character {location[1]}" + (f": {why}" if why else "")
        return {"field": str(location[0]), "message": message}
    return {"field": _field(location), "message": str(item.get("msg"))}


def install_problem_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a problem response."""

    async def on_validation(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, RequestValidationError)
        errors = [_error(item) for item in err.errors()]
        listed = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem(422, f"the request is invalid: {listed}", "invalid-request", errors=errors)

    async def on_http(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, HTTPException)
        return problem(err.status_code, str(err.detail), str(err.status_code))

    async def on_error(request: Request, err: Exception) -> JSONResponse:
        return problem_for(err, request.path_params.get("run_id"))

    async def on_unexpected(request: Request, err: Exception) -> JSONResponse:
        # Starlette's last resort (ServerErrorMiddleware): it sends this, then raises the
        # error on for the server to log. Nothing of it is the caller's to read.
        return problem(500, INTERNAL_DETAIL, "internal")

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
    for kind in (
        ApiProblem,
        PsychError,
        WorkflowUpdateFailedError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
        NotTakenInTime,
        RPCError,
    ):
        app.add_exception_handler(kind, on_error)
