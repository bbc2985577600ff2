"""``POST /a2a-push/<tenant>/<id>``: where A2A peers push the updates of tasks a Run of
this fleet waits on (``A2aSettings.push_url`` points here).

The id names a registration a worker kept in the fleet's TokenStore (``PeerPush``: the
Run, the peer, a secret) under the Run's tenant; a push must carry that secret as
``X-A2A-Notification-Token`` (compared in constant time), else it is refused (403, as an
unknown id or another tenant's path is) before its body is read, and nothing happens. Its
body is bounded by ``SMALL_BODY_BYTES`` (256 KiB: a task's state, and the app's
``max_body_bytes`` if smaller; 413 past it, before it is read when declared) and must be a
``StreamResponse`` (else 400, a body nested past the JSON decoder's depth included).
An accepted push of a task that ended or waits for its caller completes the Run's wait on
``a2a:<peer>:<task id>`` with ``{"a2a_pushed": <task id>}``: the Run then reads the task
through its own activity at once, rather than at its next poll. A push of a task still
working is acknowledged and ignored, and so is one for a wait that is over (already ended
by an earlier push or a poll, the Run settled): a peer delivers at least once. Nothing the
body says is believed beyond the task id and state: the answer is the peer's task as the
Run reads it. Completing the wait waits for the Run's worker as long as ``psych serve``'s
other updates do (``query_timeout``), then answers 503 ``no-worker`` (the wait may still
end when a worker takes it; sent again, the push is answered 204 once it has); Temporal or
a store that did not answer is a 503 too, as REST answers it (``problem_for``): a peer
sends again what a 503 answered, not what a 409 did.
"""

from __future__ import annotations

import hmac
import json
from datetime import timedelta

from a2a.types import StreamResponse, TaskState
from google.protobuf.json_format import ParseDict, ParseError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from temporalio.service import RPCError

from psych_runtime.activities.a2a import find_push
from psych_runtime.activities.contract import A2A_PUSHED
from psych_runtime.activities.tokens import TokenStore
from psych_runtime.specs import PsychError, Refused, Scope
from psych_runtime.workers._bounded import NotTakenInTime, bounded
from psych_runtime.workers.serve._problems import problem, problem_for
from psych_runtime.workflows import PsychClient, RefusalKind

PEER_PUSH_PATH = "/a2a-push/{tenant}/{push_id}"
"""The route's path (a worker's ``push_url`` is ``<app URL>/a2a-push``)."""

_ENDS_WAIT = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
        TaskState.TASK_STATE_INPUT_REQUIRED,
        TaskState.TASK_STATE_AUTH_REQUIRED,
    }
)

_OVER = frozenset(
    {RefusalKind.ALREADY_ANSWERED, RefusalKind.UNKNOWN_PENDING, RefusalKind.NOT_SUSPENDED}
)
"""Refusals saying the Run no longer waits on the task: the push is answered 204."""


def peer_push_route(client: PsychClient, tokens: TokenStore, *, query_timeout: timedelta) -> Route:
    """The route (see the module docstring) over ``tokens``, the workers' TokenStore;
    ``query_timeout``: how long completing a wait waits for the Run's worker."""

    async def pushed(request: Request) -> Response:
        tenant = request.path_params["tenant"]
        push = await find_push(tokens, tenant, request.path_params["push_id"])
        given = request.headers.get("x-a2a-notification-token", "")
        if push is None or not hmac.compare_digest(given.encode(), push.secret.encode()):
            return problem(403, "unknown push, or not its token", "forbidden")
        try:
            update = ParseDict(json.loads(await request.body()), StreamResponse())
        except (ValueError, ParseError) as err:
            return problem(400, f"not an A2A StreamResponse: {err}", "invalid")
        except RecursionError:  # nested past the decoder's depth: a peer's bad body, no 500
            return problem(400, "not an A2A StreamResponse: nested too deeply", "invalid")
        if update.HasField("task"):
            task_id, state = update.task.id, update.task.status.state
        elif update.HasField("status_update"):
            task_id, state = update.status_update.task_id, update.status_update.status.state
        else:
            return Response(status_code=204)  # an artifact or a message: no state to act on
        if state not in _ENDS_WAIT or not task_id:
            return Response(status_code=204)
        scope = Scope(tenant=push.tenant, principal=push.principal)
        try:
            await bounded(
                client.complete(
                    push.workflow_id,
                    f"a2a:{push.peer}:{task_id}",
                    {A2A_PUSHED: task_id},
                    scope=scope,
                    update_timeout=query_timeout,
                ),
                query_timeout.total_seconds(),
            )
        except NotTakenInTime as err:
            return problem(503, str(err), "no-worker")
        except Refused as err:
            if err.kind in _OVER:
                # The wait this push would end is over (a peer delivers at least once, and
                # may push after a poll read the task): taken, nothing to do. No key
                # makes the second delivery the first's: a Run waits on one task again
                # after each answer, under the same token.
                return Response(status_code=204)
            return problem(409, str(err), "conflict")
        except (PsychError, RPCError) as err:
            # As REST answers it: Temporal or a store that did not answer is a 503.
            return problem_for(err)
        return Response(status_code=204)

    return Route(PEER_PUSH_PATH, pushed, methods=["POST"], name="a2a-peer-push")
