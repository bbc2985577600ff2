"""The A2A error answering a failure of the handler, as ``psych serve``'s REST API answers
it (``_problems.problem_of``), so the two say the same of one failure.

A2A has no error for "unavailable, try again": a problem REST answers 5xx (a permits port
or a store that did not answer, no worker in time, Temporal refusing) is the protocol's
``InternalError``; one it answers 4xx (the request, or the Run's state: refused, not
permitted, invalid) is ``InvalidParamsError``. Either carries the problem's ``type`` and
``status`` as its data (``google.rpc.ErrorInfo`` metadata over HTTP+JSON), as the error of
an expired token does (``_calls.py``), so a caller tells a server's outage, worth sending
again, from its own mistake. An error none of psych's, Temporal's or the API's is an
``InternalError`` that says nothing of it (the server logs it), REST's ``internal``
problem: without this, a2a-sdk's JSON-RPC binding sent the error's own text (a store's
directory, say) to the caller.

CancelTask refused because the Run settled meanwhile is the one exception
(``cancel_error``): A2A has an error for it, ``TaskNotCancelableError``, which both
bindings send as such (JSON-RPC -32002, HTTP+JSON 409), so it is that, not
``InvalidParamsError``, still carrying REST's problem as data.

``answering`` and ``streaming`` wrap each operation of the handler so: nothing it raises
reaches the SDK but an A2A error.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, TaskNotCancelableError

from psych_runtime.specs import Refused
from psych_runtime.workers._bounded import NotTakenInTime
from psych_runtime.workers.serve._problems import (
    INTERNAL_DETAIL,
    Problem,
    ended_update,
    problem_of,
    unanswered_update,
)
from psych_runtime.workflows import RefusalKind, UpdateEndedByTemporal, UpdateUnanswered

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
Y = TypeVar("Y")

_INTERNAL = Problem(500, INTERNAL_DETAIL, "internal")
_A2A_KEY = "with the same messageId"


def _problem(err: Exception) -> Problem:
    """The problem REST answers ``err`` with; an error it does not know is logged here and
    answered as ``internal``, naming nothing of it."""
    # REST's detail names its Idempotency-Key; A2A's reply is keyed by its messageId.
    if isinstance(err, NotTakenInTime):
        cause = err.__cause__
        if isinstance(cause, UpdateUnanswered) and cause.held is not None:
            return unanswered_update(cause, key=_A2A_KEY)
        return Problem(503, str(err), "no-worker")
    if isinstance(err, UpdateEndedByTemporal):  # Temporal ended it before the wait ran out
        return ended_update(err, key=_A2A_KEY)
    found = problem_of(err)
    if found is None:
        logger.error("an A2A request failed", exc_info=err)
        return _INTERNAL
    return found


def _data(problem: Problem) -> dict[str, str]:
    """What the error carries of ``problem`` (strings, as ``ErrorInfo``'s metadata are)."""
    return {"type": problem.type, "status": str(problem.status)}


def _said(problem: Problem, doing: str | None) -> str:
    return problem.detail if doing is None else f"{doing}: {problem.detail}"


def a2a_error(err: Exception, doing: str | None = None) -> A2AError:
    """The A2A error answering ``err`` (see the module docstring); ``doing``: what failed,
    said before the problem's detail. An A2A error is answered as it is."""
    if isinstance(err, A2AError):
        return err
    problem = _problem(err)
    if problem.status >= 500:
        return InternalError(_said(problem, doing), data=_data(problem))
    return InvalidParamsError(_said(problem, doing), data=_data(problem))


def cancel_error(err: Exception) -> A2AError:
    """The A2A error answering a CancelTask whose abort failed on ``err``. A Run that
    refused it as settled (``NotSuspended``: it settled, or began to, after the task was
    read as running) is ``TaskNotCancelableError``, A2A's error for a task in a terminal
    state, carrying REST's problem (``refused``, 409) as data; anything else as
    ``a2a_error`` answers it."""
    if isinstance(err, Refused) and err.kind == RefusalKind.NOT_SUSPENDED:
        problem = _problem(err)
        return TaskNotCancelableError(problem.detail, data=_data(problem))
    return a2a_error(err)


def internal_error(err: Exception, doing: str) -> InternalError:
    """An ``InternalError`` saying that ``doing`` failed on ``err``, for what fails on the
    server's side whatever ``err`` is (reading a Run the server itself listed, following a
    Run it owns): its data is the problem's when REST answers it 5xx, else ``internal``."""
    problem = _problem(err)
    data = _data(problem if problem.status >= 500 else _INTERNAL)
    return InternalError(_said(problem, doing), data=data)


def answering(
    operation: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """``operation``, raising nothing but an A2A error (``a2a_error``)."""

    @functools.wraps(operation)
    async def answer(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await operation(*args, **kwargs)
        except A2AError:
            raise
        except Exception as err:
            raise a2a_error(err) from err

    return answer


def streaming(
    operation: Callable[P, AsyncGenerator[Y]],
) -> Callable[P, AsyncGenerator[Y]]:
    """``operation``'s stream, ending in nothing but an A2A error (``a2a_error``); closed
    when the stream is."""

    @functools.wraps(operation)
    async def stream(*args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[Y]:
        async with contextlib.aclosing(operation(*args, **kwargs)) as events:
            try:
                async for event in events:
                    yield event
            except A2AError:
                raise
            except Exception as err:
                raise a2a_error(err) from err

    return stream
