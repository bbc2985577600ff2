"""Who calls: a bearer credential mapped to the Scope its calls act in.

The operator configures the credentials; a caller never names its own tenant. Two kinds:

- API keys: the operator stores only the SHA-256 of each key (``ApiKey``), with the tenant
  and principal it stands for. A presented key is hashed and compared with every stored
  hash in constant time (``hmac.compare_digest``, no early exit), so neither a key nor
  which entry it matched leaks through timing.
- JWTs: verified with PyJWT against the operator's JWKS (``IssuerKeys``: the key set
  fetched on the event loop, one fetch at a time, ``JWKS_TIMEOUT_SECONDS`` at most from
  the first byte sent to the last read, kept ``JWKS_LIFESPAN_SECONDS``; after a failed
  fetch, none for ``JWKS_RETRY_SECONDS``, each ``IssuerUnavailable`` meanwhile saying how
  long is left: its 503's ``Retry-After``; the keys held verify their tokens through a
  failing refresh for ``JWKS_STALE_MAX_SECONDS`` past the lifespan), with the signature,
  ``exp``/``nbf``, issuer, audience and algorithms checked; the tenant and principal are
  read from configurable claims. The caller carries when the token stops being accepted
  (``Caller.expires_at``): a stream opened with it (a Run's events, an A2A task's updates)
  ends then (``_expiry.until_expiry``), so a revoked caller's expired token does not keep reading
  a Run.

Every refusal is ``Unauthorized`` with a reason safe to show the caller.

Publishing is the operator's, not a tenant's: a Version is shared by every tenant (one
Spec deployed for many; an A2A agent is the newest Version of its name), so a caller
publishes (``POST /v1/versions``, or a Spec sent inline to ``POST /v1/runs``) only with a
credential the operator marked ``publisher``: an API key's flag, or a JWT whose
``publisher_claim`` is ``true``. Any other caller runs what is published, by its hash or
over A2A, and is refused with ``NotPublisher`` (403).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jwt
from pydantic import ValidationError

from psych_runtime.specs import PsychError, Scope

_HEX64 = re.compile(r"[0-9a-f]{64}")

T = TypeVar("T")

logger = logging.getLogger(__name__)

JWKS_TIMEOUT_SECONDS = 5.0
"""Most seconds a JWKS fetch takes, whole: an issuer that never answers, or sends a byte at
a time, is a 503 then. (It ran in one of the event loop's few default threads, under
PyJWT's lock and its socket timeout alone, so a dripping issuer held that thread, and each
request behind it another, without bound.)"""
JWKS_LIFESPAN_SECONDS = 300.0
"""How long a fetched key set is used before it is fetched again."""
JWKS_COOLDOWN_SECONDS = 30.0
"""A token naming a key the set lacks fetches it again at most this often (a key rotated
in is found; a flood of made-up key ids does not become a flood of fetches). A token
signed with a key the issuer published less than this after the last fetch is refused
(401) until then: issuers publish a key before they sign with it, as is common practice."""
JWKS_RETRY_SECONDS = 10.0
"""After a fetch failed (no answer, not a 200, no key set), how long a token that would
fetch again is answered with that failure at once (a 503), without a fetch: a flood of
tokens, good or made up, asks a failing issuer once in this long, not once each."""
JWKS_STALE_MAX_SECONDS = 3600.0
"""How long past its lifespan a set whose refresh fails (the issuer down, a 5xx, a timeout)
still verifies the tokens of the keys it holds: an issuer's outage shorter than this
rejects none of them. A token of a key the set lacks is a 503 meanwhile (a key rotated in,
maybe); past this, every token is (a key held may have been withdrawn since)."""


class Unauthorized(PsychError):
    """The request carries no credential, or one no configured key or issuer vouches for."""


class IssuerUnavailable(Unauthorized):
    """The token could not be judged: its issuer's signing keys (the JWKS) could not be
    fetched or read. Not the caller's fault (the token may be good): a 503, tried again."""

    def __init__(self, message: str, retry_after: float = JWKS_RETRY_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds until the keys are fetched again: a token sent before then is answered
        with this failure, without a fetch (the 503's ``Retry-After``)."""


class NotPublisher(PsychError):
    """The caller may run published Versions but not publish one (see the module)."""


@dataclass(frozen=True)
class Caller:
    """Who a request acts for: its Scope, whether it may publish, and until when."""

    scope: Scope
    publisher: bool = False
    expires_at: float | None = None
    """Until when (seconds since the epoch) the credential is accepted: a JWT's ``exp``
    plus the configured leeway, as a new request with it would be judged; None: an API
    key, which does not expire. A response that outlives it (an event stream) ends then."""

    def publishing(self) -> Scope:
        """The Scope of a caller that publishes.

        Raises:
            NotPublisher: the credential is not a publisher's.
        """
        if not self.publisher:
            raise NotPublisher(
                "this credential may not publish: Versions are shared by every tenant, so "
                "publishing needs a credential the operator marked publisher; run a "
                "published Version by its hash instead"
            )
        return self.scope


@dataclass(frozen=True)
class ApiKey:
    """One API key as the operator configures it: its SHA-256, never the key itself.

    Attributes:
        sha256: the key's SHA-256, 64 lowercase hex digits (``ApiKey.of`` computes it).
        tenant: the tenant every call with this key acts for.
        principal: who acts (recorded on approvals, steering...); None: nobody named.
        publisher: whether calls with this key may publish Versions (the operator's).
    """

    sha256: str
    tenant: str
    principal: str | None = None
    publisher: bool = False

    def __post_init__(self) -> None:
        if not _HEX64.fullmatch(self.sha256):
            raise ValueError(
                f"api key for tenant {self.tenant!r}: sha256 must be 64 lowercase hex digits"
            )
        Scope(tenant=self.tenant, principal=self.principal)  # refuses a malformed tenant
        if not isinstance(self.publisher, bool):
            raise ValueError(f"api key for tenant {self.tenant!r}: publisher must be a bool")

    @classmethod
    def of(
        cls, key: str, tenant: str, principal: str | None = None, *, publisher: bool = False
    ) -> ApiKey:
        """The entry for ``key`` (hashed here; the key itself is not kept)."""
        return cls(hashlib.sha256(key.encode()).hexdigest(), tenant, principal, publisher)


@dataclass(frozen=True)
class JwtSettings:
    """How JWTs are verified and mapped to a Scope.

    Attributes:
        jwks_url: where the issuer publishes its signing keys (a JWKS document).
        issuer: the required ``iss``.
        audience: the required ``aud`` (one of them, when the token lists several).
        algorithms: the signature algorithms accepted (never ``none``).
        tenant_claim: the claim holding the tenant.
        principal_claim: the claim holding the principal (absent: no principal).
        leeway_seconds: clock skew allowed on ``exp``/``nbf``/``iat``.
        publisher_claim: a claim that is ``true`` in the tokens of callers who may publish
            Versions; None: no token's caller may.
    """

    jwks_url: str
    issuer: str
    audience: str
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    tenant_claim: str = "tenant"
    principal_claim: str = "sub"
    leeway_seconds: float = 30.0
    publisher_claim: str | None = None

    def __post_init__(self) -> None:
        if not self.algorithms:
            raise ValueError("jwt.algorithms: name at least one algorithm")
        if not all(isinstance(a, str) for a in self.algorithms):
            raise ValueError(f"jwt.algorithms: algorithm names, not {self.algorithms!r}")
        if any(a.lower() == "none" for a in self.algorithms):
            raise ValueError("jwt.algorithms: 'none' would accept unsigned tokens")
        for name in ("jwks_url", "issuer", "audience", "tenant_claim", "principal_claim"):
            value = getattr(self, name)
            if not value:
                raise ValueError(f"jwt.{name}: required")
            if not isinstance(value, str):
                raise ValueError(f"jwt.{name}: a string, not {value!r}")
        if self.publisher_claim is not None and (
            not isinstance(self.publisher_claim, str) or not self.publisher_claim
        ):
            raise ValueError(f"jwt.publisher_claim: a claim's name, not {self.publisher_claim!r}")
        leeway = self.leeway_seconds
        if (
            isinstance(leeway, bool)
            or not isinstance(leeway, int | float)
            or not 0 <= leeway < math.inf
        ):
            raise ValueError(f"jwt.leeway_seconds: a number of seconds from 0, not {leeway!r}")


@dataclass(frozen=True)
class AuthSettings:
    """The credentials a server accepts: API keys and/or JWTs (at least one)."""

    api_keys: tuple[ApiKey, ...] = ()
    jwt: JwtSettings | None = None

    @property
    def configured(self) -> bool:
        """Whether any credential could be accepted."""
        return bool(self.api_keys) or self.jwt is not None


class IssuerKeys:
    """An issuer's signing keys, from its JWKS document at ``url``, fetched without a
    thread: one fetch at a time (requests arriving meanwhile wait for its answer), each
    ``JWKS_TIMEOUT_SECONDS`` at most, the set kept ``JWKS_LIFESPAN_SECONDS``. A failed
    fetch is not tried again for ``JWKS_RETRY_SECONDS``; the keys held meanwhile (a fetch
    for an unknown key that failed) still verify the tokens they sign, and so do those of
    a set past its lifespan for ``JWKS_STALE_MAX_SECONDS`` more, whose refresh failed or is
    under way (such a token does not wait for it). Serving a stale set is logged once (a
    warning), its end too (past the bound: an error; fetched again: an info)."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: seconds, monotonic (a test's own, to pass the cooldowns unwaited)."""
        self.url = url
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched = -math.inf
        self._failed: tuple[float, str] | None = None
        """When the last fetch failed, and why (None: it did not)."""
        self._logged: str | None = None
        """What the log was last told of a stale set: ``serving`` or ``expired`` (None:
        nothing since the last fetch that worked)."""
        self._lock = asyncio.Lock()

    async def key_for(self, token: str) -> jwt.PyJWK:
        """The signing key the token's header names (its ``kid``).

        Raises:
            Unauthorized: the token is malformed, or its key is not in the set.
            IssuerUnavailable: the set could not be fetched or read (now, or by a fetch
                less than ``JWKS_RETRY_SECONDS`` ago), and holds no key for the token
                within ``JWKS_STALE_MAX_SECONDS`` past its lifespan.
        """
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.InvalidTokenError as err:
            raise Unauthorized(f"the token is malformed: {err}") from err
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("the token's header names no signing key ('kid')")
        now = self._clock()
        age = now - self._fetched
        if age >= JWKS_LIFESPAN_SECONDS or (kid not in self._keys and age >= JWKS_COOLDOWN_SECONDS):
            # A key of a stale set (a key held fetches only then), within the bound.
            held = (
                self._keys.get(kid)
                if age < JWKS_LIFESPAN_SECONDS + JWKS_STALE_MAX_SECONDS
                else None
            )
            if held is not None and self._lock.locked():
                return held  # a refresh is under way: its answer is not waited for
            failed = self._failure(now)  # answered at once, without queueing for the lock
            if failed is None:
                async with self._lock:
                    # A fetch that ended while this request waited answers it too: a hung
                    # issuer costs the requests queued behind one fetch one bound, not one each.
                    failed = self._failure(now)
                    if failed is None and self._fetched <= now:
                        failed = await self._refresh()
            if failed is not None:
                if held is not None:
                    self._log_stale(now, str(failed), expired=False)
                    return held
                if self._keys and age >= JWKS_LIFESPAN_SECONDS + JWKS_STALE_MAX_SECONDS:
                    self._log_stale(now, str(failed), expired=True)
                raise failed
        key = self._keys.get(kid)
        if key is None:
            raise Unauthorized(f"the token's signing key is not in the JWKS: no key {kid!r}")
        return key

    def _failure(self, now: float) -> IssuerUnavailable | None:
        """The last fetch's failure if it ended less than ``JWKS_RETRY_SECONDS`` before
        ``now`` (or after it: while this request waited)."""
        if self._failed is None or now >= self._failed[0] + JWKS_RETRY_SECONDS:
            return None
        # A new error each time: one instance raised by every request would grow its
        # traceback by each raise.
        failed_at, why = self._failed
        return IssuerUnavailable(why, failed_at + JWKS_RETRY_SECONDS - self._clock())

    async def _refresh(self) -> IssuerUnavailable | None:
        """Fetch the set: None when it worked, else why not (kept for the retry's wait)."""
        try:
            keys = await self._fetch()
        except IssuerUnavailable as err:
            self._failed = (self._clock(), str(err))
            return err
        self._keys, self._fetched, self._failed = keys, self._clock(), None
        if self._logged is not None:
            logger.info("the JWKS at %s was fetched again: its new key set is used", self.url)
            self._logged = None
        return None

    def _log_stale(self, now: float, why: str, *, expired: bool) -> None:
        """Log, once each, that a stale set's keys verify tokens though its refresh failed
        (a warning), and that it is too old to (``expired``: an error)."""
        state = "expired" if expired else "serving"
        if state == self._logged:
            return
        self._logged = state
        if expired:
            logger.error(
                "the JWKS at %s cannot be fetched (%s) and the set held is %.0f s past its "
                "lifespan: every token is refused (503) until it is fetched",
                self.url,
                why,
                now - self._fetched - JWKS_LIFESPAN_SECONDS,
            )
        else:
            logger.warning(
                "the JWKS at %s cannot be fetched (%s): the keys held are used past the "
                "set's lifespan, for %.0f s more at most; tokens of other keys are refused (503)",
                self.url,
                why,
                self._fetched + JWKS_LIFESPAN_SECONDS + JWKS_STALE_MAX_SECONDS - now,
            )

    async def _fetch(self) -> dict[str, jwt.PyJWK]:
        import httpx  # here: a worker that serves no JWT issuer never needs it

        try:
            async with (
                asyncio.timeout(JWKS_TIMEOUT_SECONDS),
                # Redirects followed as PyJWKClient's urllib did (an issuer serving its
                # key set from another path was a 503 on every token).
                httpx.AsyncClient(timeout=JWKS_TIMEOUT_SECONDS, follow_redirects=True) as http,
            ):
                response = await http.get(self.url)
        except (httpx.HTTPError, TimeoutError) as err:
            raise IssuerUnavailable(
                "the token's signing keys could not be fetched from its issuer: try again"
            ) from err
        unreadable = IssuerUnavailable(
            "the token's signing keys could not be read from its issuer's answer: try again"
        )
        if response.status_code != 200:
            raise unreadable
        try:
            document = response.json()
            if not isinstance(document, dict):  # from_dict would call .get on it
                raise unreadable
            found = jwt.PyJWKSet.from_dict(document).keys
        except (ValueError, jwt.PyJWKSetError) as err:
            raise unreadable from err
        keys = {
            key.key_id: key
            for key in found
            if key.key_id and key.public_key_use in ("sig", None)  # as PyJWKClient keeps
        }
        if not keys:
            raise unreadable
        return keys


@dataclass
class Authenticator:
    """Maps an ``Authorization`` header to the caller's Scope (see the module docstring)."""

    settings: AuthSettings
    _jwks: IssuerKeys | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.settings.jwt is not None:
            self._jwks = IssuerKeys(self.settings.jwt.jwks_url)

    async def scope_for(self, authorization: str | None) -> Scope:
        """The Scope of the request's ``Authorization`` header.

        Raises:
            Unauthorized: no bearer credential, or none that is accepted (says which).
        """
        return (await self.caller_for(authorization)).scope

    async def caller_for(self, authorization: str | None) -> Caller:
        """Who the request's ``Authorization`` header stands for.

        Raises:
            Unauthorized: no bearer credential, or none that is accepted (says which).
        """
        if not authorization:
            raise Unauthorized("the request has no Authorization header (Bearer <credential>)")
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthorized("the Authorization header must be 'Bearer <credential>'")
        key = self._api_key(credential)
        if key is not None:
            return Caller(Scope(tenant=key.tenant, principal=key.principal), key.publisher)
        if self.settings.jwt is not None and credential.count(".") == 2:
            return await self._jwt_caller(credential, self.settings.jwt)
        raise Unauthorized("the credential is not a known API key or an accepted token")

    def _api_key(self, credential: str) -> ApiKey | None:
        digest = hashlib.sha256(credential.encode()).hexdigest()
        found: ApiKey | None = None
        for key in self.settings.api_keys:  # every entry compared: no early exit
            if hmac.compare_digest(digest, key.sha256):
                found = key
        return found

    async def _jwt_caller(self, token: str, settings: JwtSettings) -> Caller:
        assert self._jwks is not None
        claims = self._verified_claims(token, await self._jwks.key_for(token), settings)
        tenant = claims.get(settings.tenant_claim)
        principal = claims.get(settings.principal_claim)
        if not isinstance(tenant, str):
            raise Unauthorized(f"the token has no string claim {settings.tenant_claim!r}")
        if principal is not None and not isinstance(principal, str):
            raise Unauthorized(f"the token's claim {settings.principal_claim!r} is not a string")
        publisher = settings.publisher_claim is not None and (
            claims.get(settings.publisher_claim) is True
        )
        # Required and checked to be a number by PyJWT, which accepts it until this.
        expires_at = float(claims["exp"]) + settings.leeway_seconds
        try:
            return Caller(Scope(tenant=tenant, principal=principal), publisher, expires_at)
        except ValidationError as err:
            wrong = {str(error["loc"][0]) for error in err.errors() if error["loc"]}
            problems = [
                f"the token's claim {claim!r} is not a valid {field} ({rule})"
                for field, claim, rule in (
                    ("tenant", settings.tenant_claim, "1 to 128 letters, digits, '_' and '.'"),
                    ("principal", settings.principal_claim, "at most 256 characters"),
                )
                if field in wrong
            ]
            raise Unauthorized("; ".join(problems) or str(err)) from err

    @staticmethod
    def _verified_claims(
        token: str, signing_key: jwt.PyJWK, settings: JwtSettings
    ) -> dict[str, Any]:
        """The token's claims once verified with ``signing_key``."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                signing_key.key,
                algorithms=list(settings.algorithms),
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway_seconds,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.InvalidTokenError as err:
            raise Unauthorized(f"the token was refused: {err}") from err
        return claims


def api_keys_from(entries: Sequence[Any], source: str) -> tuple[ApiKey, ...]:
    """API keys from plain data (``[{sha256, tenant, principal?, publisher?}, ...]``).

    Raises:
        ValueError: naming ``source`` and the entry that is wrong.
    """
    keys: list[ApiKey] = []
    for index, entry in enumerate(entries):
        where = f"{source}[{index}]"
        if not isinstance(entry, dict) or set(entry) - {
            "sha256",
            "tenant",
            "principal",
            "publisher",
        }:
            raise ValueError(
                f"{where}: a mapping of sha256, tenant and optional principal and publisher"
            )
        publisher = entry.get("publisher", False)
        if not isinstance(publisher, bool):
            raise ValueError(f"{where}: publisher must be true or false, not {publisher!r}")
        try:
            keys.append(
                ApiKey(
                    str(entry["sha256"]), str(entry["tenant"]), entry.get("principal"), publisher
                )
            )
        except KeyError as err:
            raise ValueError(f"{where}: {err.args[0]} is required") from err
        except (ValueError, ValidationError) as err:
            raise ValueError(f"{where}: {err}") from err
    return tuple(keys)
