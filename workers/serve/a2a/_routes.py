"""``a2a_routes``: the A2A endpoints of every published agent, as one Starlette mount.

Under ``/a2a/<agent>``:

- ``GET /.well-known/agent-card.json``: the agent's card (public, like any card: it
  says how to authenticate; nothing else is served without a credential);
- ``POST /``: the JSON-RPC binding (``a2a-sdk``'s dispatcher);
- the HTTP+JSON binding's paths (``/message:send``, ``/tasks/{id}``, ...; the SDK's).

Every call but the card's passes ``Authenticated`` first: the ``Authorization`` header
becomes the caller (``psych serve``'s ``Authenticator``: its Scope, and until when its
credential is accepted) or a 401; the caller and the agent name then reach the handler
through the SDK's call context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, Router
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from psych_runtime.workers.serve._auth import Caller, Unauthorized
from psych_runtime.workers.serve._problems import problem, problem_for
from psych_runtime.workers.serve.a2a._calls import AGENT_KEY, CALLER_KEY
from psych_runtime.workers.serve.a2a._cards import AgentCatalogue, agent_card
from psych_runtime.workers.serve.a2a._handler import PsychRequestHandler
from psych_runtime.workers.serve.a2a._list_tasks import LIST_SCAN
from psych_runtime.workers.serve.a2a._push import PushRegistry
from psych_runtime.workflows import PsychClient

A2A_PREFIX = "/a2a"
"""Where the agents are mounted: ``/a2a/<agent>``."""

_ASGI_CALLER_KEY = "psych.a2a.caller"

CallerFor = Callable[[str | None], Awaitable[Caller]]
"""An ``Authorization`` header to who the request acts for (raises ``Unauthorized``)."""


class Authenticated:
    """ASGI middleware: the request's caller into the ASGI scope, or a 401 problem."""

    def __init__(
        self, app: ASGIApp, caller_for: CallerFor, looking: Callable[[], None] | None = None
    ) -> None:
        self.app = app
        self.caller_for = caller_for
        self.looking = looking

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.looking is not None:
            # Tasks a stopped server process watched are taken over on some request: the
            # app has no lifespan of its own (it may be mounted where none runs).
            self.looking()
        header = Request(scope).headers.get("authorization")
        try:
            scope[_ASGI_CALLER_KEY] = await self.caller_for(header)
        except Unauthorized as err:
            await problem_for(err)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _CallContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the authenticated caller and the agent called."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER_KEY] = request.scope.get(_ASGI_CALLER_KEY)
        context.state[AGENT_KEY] = request.path_params.get("agent")
        # The SDK reads headers (A2A-Version, extensions) from the state; credentials stay out.
        headers = context.state.get("headers", {})
        context.state["headers"] = {
            k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")
        }
        return context


def a2a_routes(
    client: PsychClient,
    caller_for: CallerFor,
    *,
    jwt: bool,
    query_timeout: timedelta,
    pushes: PushRegistry,
    list_scan: int = LIST_SCAN,
) -> Mount:
    """The mount serving the agents of ``client.store`` (see the module docstring).

    Args:
        client: the PsychClient every task goes through (its store lists the agents).
        caller_for: how a request's ``Authorization`` header becomes its caller (whose
            credential's expiry ends the streams it opens).
        jwt: whether JWTs are accepted (the cards' bearer scheme says so).
        query_timeout: how long a read waits for a Run's worker.
        pushes: the push notification registry (its store, lease and egress port). Its
            maker closes it (``aclose``) when the server stops: the mount makes nothing it
            could not close (``create_app`` closes the one it makes at the app's shutdown).
        list_scan: the most Runs one ListTasks looks at, whatever its status filter
            (``ServeSettings.a2a_list_scan``).
    """
    catalogue = AgentCatalogue(client.store)
    handler = PsychRequestHandler(
        client, catalogue, pushes, query_timeout=query_timeout, list_scan=list_scan
    )
    builder = _CallContext()

    async def card(request: Request) -> Response:
        pushes.look()
        name = request.path_params["agent"]
        version = await catalogue.latest(name)
        if version is None:
            return problem(404, f"no published agent {name!r}", "not-found")
        url = str(request.url_for("a2a-agent", agent=name, path="")).rstrip("/")
        return JSONResponse(agent_card_to_dict(agent_card(version, url, jwt=jwt)))

    bindings = Router(
        routes=[
            *create_jsonrpc_routes(handler, "/", context_builder=builder),
            *create_rest_routes(handler, context_builder=builder),
        ]
    )
    return Mount(
        f"{A2A_PREFIX}/{{agent}}",
        name="a2a-agent",
        routes=[
            Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]),
            Mount("", app=Authenticated(bindings, caller_for, pushes.look)),
        ],
    )
