"""psych_runtime.workers.serve: ``psych serve``, the HTTP API as one ASGI application.

``create_app(ServeSettings(...))`` is a FastAPI app a company can run (``psych serve``)
or mount in its own; every route is one PsychClient call in the caller's Scope, which the
operator's credentials (API keys, JWTs against a JWKS) decide.
"""

from psych_runtime.workers.serve._app import create_app
from psych_runtime.workers.serve._auth import (
    ApiKey,
    Authenticator,
    AuthSettings,
    Caller,
    IssuerUnavailable,
    JwtSettings,
    NotPublisher,
    Unauthorized,
    api_keys_from,
)
from psych_runtime.workers.serve._events import (
    EventItem,
    EventPosition,
    parse_event_id,
    run_events,
)
from psych_runtime.workers.serve._limits import SMALL_BODY_BYTES
from psych_runtime.workers.serve._settings import (
    DEFAULT_MAX_BODY_BYTES,
    ServeSection,
    ServeSettings,
    parse_serve_section,
)

__all__ = [
    "ApiKey",
    "AuthSettings",
    "Authenticator",
    "Caller",
    "DEFAULT_MAX_BODY_BYTES",
    "EventItem",
    "EventPosition",
    "IssuerUnavailable",
    "JwtSettings",
    "NotPublisher",
    "SMALL_BODY_BYTES",
    "ServeSection",
    "ServeSettings",
    "Unauthorized",
    "api_keys_from",
    "create_app",
    "parse_event_id",
    "parse_serve_section",
    "run_events",
]
