"""What an A2A call carries from the routes to the handler, through the SDK's call context:
who calls (``Caller``: its Scope, and until when its credential is accepted) and the agent
called; and waits bounded by that credential: a stream's (``until_caller_expires``) and a
blocking call's (``wait_while_caller_may``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.utils.errors import InternalError

from psych_runtime.specs import Scope
from psych_runtime.workers.serve._auth import Caller
from psych_runtime.workers.serve._expiry import CredentialExpired, until_expiry
from psych_runtime.workers.serve._problems import problem_type

CALLER_KEY = "psych.caller"
"""Where the call context's state holds the caller (``Caller``)."""
AGENT_KEY = "psych.agent"
"""Where it holds the name of the agent called."""


def caller_of(context: ServerCallContext) -> tuple[Scope, str]:
    """The caller's Scope and the agent called.

    Raises:
        InternalError: the call did not pass the routes' authentication.
    """
    return _caller(context).scope, _agent(context)


def _caller(context: ServerCallContext) -> Caller:
    caller = context.state.get(CALLER_KEY)
    if not isinstance(caller, Caller):
        # The routes authenticate every call before it gets here; a handler mounted
        # without them must not act for nobody.
        raise InternalError("the call was not authenticated")
    return caller


def _agent(context: ServerCallContext) -> str:
    agent = context.state.get(AGENT_KEY)
    if not isinstance(agent, str):
        raise InternalError("the call names no agent")
    return agent


async def until_caller_expires(
    events: AsyncGenerator[Event], context: ServerCallContext
) -> AsyncGenerator[Event]:
    """A stream's ``events`` until the caller's credential expires, then its last error
    (``until_expiry``: only each wait for the next event is bounded).

    A2A has no error for it: authentication is the transport's (a 401), which a stream
    that started cannot send any more. So the stream ends with the protocol's generic
    error, which the SDK sends as the stream's last event (JSON-RPC: an error response,
    -32603; HTTP+JSON: an ``error`` event), its ``ErrorInfo`` metadata the problem a
    request with the expired token is refused with (type, status 401) and ``expired_at``.

    Raises:
        InternalError: the credential expired (see above).
    """
    async with contextlib.aclosing(until_expiry(events, _caller(context).expires_at)) as bounded:
        try:
            async for event in bounded:
                yield event
        except CredentialExpired as err:
            raise InternalError(
                "the token this stream was opened with has expired: send a fresh one and "
                "subscribe to the task again (SubscribeToTask) to follow it on",
                data={
                    "type": problem_type(401, "unauthorized"),
                    "status": "401",
                    # ErrorInfo's metadata are strings; the seconds as JWT's exp writes them.
                    "expired_at": format(err.expires_at, "f").rstrip("0").rstrip("."),
                },
            ) from err


async def wait_while_caller_may(events: AsyncGenerator[Event], context: ServerCallContext) -> None:
    """Read ``events`` to their end, or until the caller's credential expires, whichever
    comes first (``until_expiry``); ``events`` is closed either way.

    For a call that answers once (a blocking SendMessage): it waits for the task to stop,
    but not past the credential it was sent with. Then it answers with the task as it is
    (still working), which the caller follows with GetTask and a fresh credential, as it
    would a task sent with ``returnImmediately``. An error would lose the task's id.
    """
    async with contextlib.aclosing(until_expiry(events, _caller(context).expires_at)) as bounded:
        with contextlib.suppress(CredentialExpired):
            async for _ in bounded:
                pass
