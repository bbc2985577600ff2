"""``ServeSettings``: what ``create_app`` is built from, and the ``serve:`` section of the
global settings file that ``psych serve`` reads it from.

The section (global settings file only: a project checkout must not be able to let
callers in)::

    serve:
      api_keys:                              # only each key's SHA-256 is stored
        - {sha256: 9f86d0...0f00a08, tenant: acme, principal: ops}
      jwt:
        jwks_url: https://idp.example.com/.well-known/jwks.json
        issuer: https://idp.example.com/
        audience: psych
        algorithms: [RS256]                  # default RS256, ES256
        tenant_claim: tenant                 # default tenant
        principal_claim: sub                 # default sub
      max_body_bytes: 4194304
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psych_runtime.activities.egress import EgressSettings
from psych_runtime.activities.tokens import TokenStore
from psych_runtime.specs import SpecError
from psych_runtime.workers.serve._auth import AuthSettings, JwtSettings, api_keys_from
from psych_runtime.workers.serve.a2a._list_tasks import LIST_SCAN
from psych_runtime.workflows import PsychClient

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""Room for the largest Spec document (``MAX_DOCUMENT_BYTES``, 2 MiB) and its envelope."""

_SECTION_KEYS = frozenset({"api_keys", "jwt", "max_body_bytes"})
_JWT_KEYS = frozenset(JwtSettings.__dataclass_fields__)


@dataclass(frozen=True)
class ServeSettings:
    """What the HTTP API is built from.

    Attributes:
        client: the PsychClient every call goes through (its version store, task queue
            and registry are the API's).
        auth: the credentials accepted (API keys and/or JWTs; at least one).
        max_body_bytes: the largest request body accepted (larger: 413); routes that take
            small bodies accept at most ``SMALL_BODY_BYTES`` (256 KiB) below it.
        keepalive_seconds: how often an idle event stream sends a comment.
        query_timeout_seconds: how long status, report, transcript and records wait for
            the Run's worker to answer (then 503); positive, a microsecond at least (zero
            would be no timeout at all: ValueError).
        push_tokens: where A2A push notification configurations are kept: the fleet's
            TokenStore (``psych serve`` gives its workers' one, sealed like theirs), so
            every process sharing it serves and delivers them, across restarts; None: in
            this process's memory only.
        push_lease_seconds: how long a process's silence about a task whose push
            notifications it delivers lasts before another process takes the task over.
        tokens: the workers' token store; with one, the app answers the OAuth redirect
            of MCP servers a person consents to at ``/oauth/callback`` (no credential:
            the redirect's state is what finds the Run).
        egress: where the app's own requests (A2A push notifications to callers'
            webhooks) may connect, judged as a Spec's URLs are for the caller's tenant;
            None: the environment's rules (``PSYCH_EGRESS_*``) and the global settings
            file's ``egress:`` section (``psych serve`` gives the settings file it was
            given).
        a2a_list_scan: the most Runs one A2A ListTasks looks at, whatever its status
            filter (``a2a._list_tasks.LIST_SCAN``); its page then ends there, with a next
            page token if more follow. A page filtered after reading (working, failed)
            can so hold fewer tasks than asked, even none; one of an exact filter (none,
            completed, canceled, input-required), whose every Run looked at is a task,
            holds fewer only when this is below its ``pageSize``.
        at_shutdown: what the app's shutdown (its lifespan) closes besides what it made,
            each awaited once, the last first: ``psych serve`` gives one that closes the
            stores it opened for the app (an S3 blob or token store holds a connection
            pool), as ``psych worker`` and ``psych report --inputs`` close theirs. An app
            that mounts this one, whose lifespan is not run, closes them at its own
            shutdown.
    """

    client: PsychClient
    auth: AuthSettings
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    keepalive_seconds: float = 15.0
    query_timeout_seconds: float = 10.0
    push_tokens: TokenStore | None = None
    push_lease_seconds: float = 30.0
    tokens: TokenStore | None = None
    egress: EgressSettings | None = None
    a2a_list_scan: int = LIST_SCAN
    at_shutdown: tuple[Callable[[], Awaitable[None]], ...] = ()

    def __post_init__(self) -> None:
        """Refuse a ``query_timeout_seconds`` that is not positive: the SDK takes a zero RPC
        timeout as none at all (every read would wait forever); NaN and infinity are no
        time either. The routes wait it as a ``timedelta``: one under half a microsecond is
        ``timedelta(0)`` (zero again), one past its range does not make one."""
        seconds = self.query_timeout_seconds
        try:
            given = 0 < seconds < math.inf and timedelta(seconds=seconds) > timedelta(0)
        except OverflowError:
            given = False
        if not given:
            raise ValueError(
                f"ServeSettings.query_timeout_seconds: a positive number of seconds (a "
                f"microsecond at least, {timedelta.max.days} days at most), not {seconds!r} "
                "(a zero RPC timeout is none at all to Temporal's SDK)"
            )


@dataclass(frozen=True)
class ServeSection:
    """The ``serve:`` section as read from a settings file."""

    auth: AuthSettings = field(default_factory=AuthSettings)
    max_body_bytes: int | None = None


def parse_serve_section(data: Any, source: str) -> ServeSection:
    """The ``serve:`` section of a settings file (plain data; None: absent).

    Raises:
        SpecError: naming ``source`` and the path of every problem.
    """
    if data is None:
        return ServeSection()
    where = f"{source}: serve"
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a mapping, not {type(data).__name__}")
    unknown = sorted(set(data) - _SECTION_KEYS, key=str)
    if unknown:
        raise SpecError(
            f"{where}.{unknown[0]}: unknown setting (known: {', '.join(sorted(_SECTION_KEYS))})"
        )
    keys = data.get("api_keys") or []
    if not isinstance(keys, list):
        raise SpecError(f"{where}.api_keys: a list of {{sha256, tenant, principal, publisher}}")
    try:
        api_keys = api_keys_from(keys, f"{where}.api_keys")
    except ValueError as err:
        raise SpecError(str(err)) from err
    jwt = _jwt(data.get("jwt"), f"{where}.jwt")
    size = data.get("max_body_bytes")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        raise SpecError(f"{where}.max_body_bytes: a positive number of bytes, not {size!r}")
    return ServeSection(AuthSettings(api_keys, jwt), size)


def _jwt(data: Any, where: str) -> JwtSettings | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a mapping, not {type(data).__name__}")
    unknown = sorted(set(data) - _JWT_KEYS, key=str)
    if unknown:
        known = ", ".join(sorted(_JWT_KEYS))
        raise SpecError(f"{where}.{unknown[0]}: unknown setting (known: {known})")
    values = dict(data)
    if "algorithms" in values:
        algorithms = values["algorithms"]
        if not isinstance(algorithms, list) or not all(isinstance(a, str) for a in algorithms):
            raise SpecError(f"{where}.algorithms: a list of algorithm names")
        values["algorithms"] = tuple(algorithms)
    try:
        return JwtSettings(**values)
    except TypeError as err:
        raise SpecError(f"{where}: jwks_url, issuer and audience are required") from err
    except ValueError as err:
        raise SpecError(f"{where}: {err}") from err
