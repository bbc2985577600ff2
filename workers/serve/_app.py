"""``create_app``: the HTTP API of psych as one FastAPI application.

Every ``/v1`` route authenticates the caller (``Authenticator``: the Scope comes from the
credential, never from the request) and makes one PsychClient call with that Scope.
Mountable in a company's own app (``company.mount("/psych", create_app(settings))``): it
needs no lifespan to serve (it starts nothing at startup), so it works where a mounted
app's lifespan is not run. Its lifespan's shutdown closes what the app made (the A2A push
registry, ``app.state.a2a_pushes``); an app that mounts it, whose lifespan Starlette does
not run for its mounts, closes that registry at its own shutdown. The shutdown then closes
what it was given to close (``ServeSettings.at_shutdown``: ``psych serve``'s blob and
token stores).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, which
# name the closure's `Caller`, at definition time.
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from psych_runtime.activities.egress import Egress
from psych_runtime.specs import Scope
from psych_runtime.workers._oauth_callback import oauth_callback_route
from psych_runtime.workers.serve._auth import Authenticator, Caller, Unauthorized
from psych_runtime.workers.serve._context import ApiContext
from psych_runtime.workers.serve._health_routes import health_routes
from psych_runtime.workers.serve._limits import SMALL_BODY_BYTES, BodyLimit, RouteBound, route_path
from psych_runtime.workers.serve._problems import install_problem_handlers, problem_for
from psych_runtime.workers.serve._run_actions import action_routes
from psych_runtime.workers.serve._run_routes import run_routes
from psych_runtime.workers.serve._settings import ServeSettings
from psych_runtime.workers.serve._spec_routes import spec_routes
from psych_runtime.workers.serve.a2a import (
    MemoryTokenStore,
    PushRegistry,
    PushStore,
    a2a_routes,
    peer_push_route,
)
from psych_runtime.workers.serve.console import console_routes

_BEARER = HTTPBearer(auto_error=False, description="an API key or a JWT the operator accepts")

_CALLER = "psych.serve.caller"
"""Where ``_AuthenticatedFirst`` keeps the caller in the request's ASGI scope."""

_SMALL_BODIES = (
    RouteBound(re.compile(r"/v1/runs/[^/]+/(approve|deny|answer|abort|steer)"), SMALL_BODY_BYTES),
    RouteBound(re.compile(r"/a2a-push/[^/]+/[^/]+"), SMALL_BODY_BYTES),  # PEER_PUSH_PATH
)
"""The routes whose bodies are bounded by ``SMALL_BODY_BYTES`` rather than the app's
``max_body_bytes`` (a Run's ``complete`` is not: its payload is an external system's)."""


class _AuthenticatedFirst:
    """ASGI middleware: a ``/v1`` request with a body is authenticated before its body is
    read (FastAPI reads a route's body before it solves its dependencies, the caller
    among them), so an unauthenticated one is refused 401 unread; the caller is kept in
    the scope for the route's dependency. (The A2A bindings authenticate before they read
    as it is, and the peer push route checks its token first.)"""

    def __init__(self, app: ASGIApp, caller_for: Callable[[str | None], Awaitable[Caller]]) -> None:
        self.app = app
        self.caller_for = caller_for

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] not in ("GET", "HEAD", "OPTIONS")
            and route_path(scope).startswith("/v1/")
        ):
            try:
                scope[_CALLER] = await self.caller_for(Headers(scope=scope).get("authorization"))
            except Unauthorized as err:
                await problem_for(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(settings: ServeSettings) -> FastAPI:
    """The HTTP API (routes and contract: ``workers/serve/README.md``).

    Raises:
        ValueError: no credential is configured (every request would be refused).
    """
    if not settings.auth.configured:
        raise ValueError("psych serve needs API keys or a JWT issuer to accept any caller")
    authenticator = Authenticator(settings.auth)

    async def identity(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> Caller:
        # HTTPBearer declares the scheme in the OpenAPI document; the header itself is
        # read here, so a malformed one is answered with what is wrong with it.
        known = request.scope.get(_CALLER)  # authenticated before the body was read
        if isinstance(known, Caller):
            return known
        return await authenticator.caller_for(request.headers.get("authorization"))

    async def caller(who: Annotated[Caller, Depends(identity)]) -> Scope:
        return who.scope

    context = ApiContext(settings.client, settings, caller, identity)
    store = PushStore(
        settings.push_tokens if settings.push_tokens is not None else MemoryTokenStore()
    )
    lease = settings.push_lease_seconds
    pushes = (
        PushRegistry(store=store, lease_seconds=lease)  # the environment's and file's rules
        if settings.egress is None
        else PushRegistry(store=store, lease_seconds=lease, egress=Egress(settings.egress))
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Each closed even when one before it fails, the last pushed first: the registry,
        # which may still write to the token store, before the stores.
        async with AsyncExitStack() as closing:
            for close in settings.at_shutdown:
                closing.push_async_callback(close)
            # The app made the registry, so its shutdown closes it: another process takes
            # its tasks' push notifications over at once.
            closing.push_async_callback(pushes.aclose)
            yield

    app = FastAPI(
        title="psych-runtime",
        summary="Publish Specs and drive durable agent and workflow Runs.",
        version="1",
        lifespan=lifespan,
    )
    # Where an app that mounts this one (its lifespan not run) finds it to close it.
    app.state.a2a_pushes = pushes
    install_problem_handlers(app)
    # The last added runs first: a body's bound is judged before its caller is.
    app.add_middleware(_AuthenticatedFirst, caller_for=authenticator.caller_for)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, routes=_SMALL_BODIES)
    app.include_router(health_routes(settings.client.temporal))
    app.include_router(spec_routes(context))
    app.include_router(run_routes(context))
    app.include_router(action_routes(context))
    app.router.routes.append(console_routes())
    if settings.tokens is not None:
        app.router.routes.append(oauth_callback_route(settings.client, settings.tokens))
    app.router.routes.append(
        a2a_routes(
            settings.client,
            authenticator.caller_for,
            jwt=settings.auth.jwt is not None,
            query_timeout=context.query_timeout,
            pushes=pushes,
            list_scan=settings.a2a_list_scan,
        )
    )
    if settings.push_tokens is not None:
        # Where A2A peers push updates of tasks this fleet's Runs wait on (the workers'
        # A2aSettings.push_url); authenticated by each push's own token, not a caller key.
        app.router.routes.append(
            peer_push_route(
                settings.client, settings.push_tokens, query_timeout=context.query_timeout
            )
        )
    return app
