"""The SecretResolver port and its two shipped implementations.

Specs and payloads name credentials (``HttpTool.credential = "payments-api-key"``); only an
activity, at call time, turns a name into a value through a ``SecretResolver``. A resolved
value is used for one request and then dropped: it never enters a payload, a Record, a
blob or a log line, and errors name the credential, never its value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from psych_runtime.specs import NotFound, Scope


class SecretNotFound(NotFound):
    """No secret is available under the requested credential name (for that Scope)."""


@runtime_checkable
class SecretResolver(Protocol):
    """Port: credential name -> secret value, resolved per call for a Scope.

    Implementations may resolve per tenant or principal (a vault path per tenant, say);
    they must not cache a value anywhere it could be serialised.
    """

    async def resolve(self, scope: Scope, name: str) -> str:
        """The secret stored as ``name`` for ``scope``.

        Raises:
            SecretNotFound: there is no such secret for this scope.
        """
        ...


async def resolve_secret(secrets: SecretResolver, scope: Scope, name: str) -> str:
    """``secrets.resolve(scope, name)``, refusing an answer no request can use.

    A resolver written as a lookup may answer None for a name it lacks, or an empty
    string for one configured empty; sent, those are ``Authorization: Bearer None`` or an
    empty token, never what was meant. Every activity resolves through this function, so
    such an answer is a missing credential, named, wherever it comes from.

    Raises:
        SecretNotFound: there is no such secret, or the resolver answered an empty string
            or something other than a str (named by its type; a value is never shown).
    """
    value: object = await secrets.resolve(scope, name)
    if not isinstance(value, str):
        raise SecretNotFound(
            f"credential {name!r}: the SecretResolver answered {type(value).__name__}, not a str"
        )
    if not value:
        raise SecretNotFound(f"credential {name!r}: the SecretResolver answered an empty value")
    return value


_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


class EnvSecretResolver:
    """Secrets from environment variables: ``PSYCH_SECRET_API_KEY`` holds ``api-key``.

    The embedded default. It ignores the Scope: every tenant served by the process sees
    the same variables, so use a tenant-aware resolver when tenants must not share
    credentials. An empty variable counts as absent (an empty bearer token is never
    meant).
    """

    def __init__(
        self, environ: Mapping[str, str] = os.environ, prefix: str = "PSYCH_SECRET_"
    ) -> None:
        """Resolve from ``environ`` (read at each call, so later changes are seen).

        Args:
            environ: the variables to read; the process environment by default.
            prefix: prepended to the mangled credential name.
        """
        self._environ = environ
        self.prefix = prefix

    def variable(self, name: str) -> str:
        """The environment variable that holds credential ``name``.

        Upper-cased, with every character other than an ASCII letter or digit replaced by
        ``_``.
        """
        return self.prefix + _NOT_ALNUM.sub("_", name).upper()

    async def resolve(self, scope: Scope, name: str) -> str:
        """The value of ``variable(name)``.

        Raises:
            SecretNotFound: the variable is unset or empty.
        """
        variable = self.variable(name)
        value = self._environ.get(variable)
        if not value:
            raise SecretNotFound(
                f"credential {name!r} is not configured: set environment variable {variable}"
            )
        return value

    def __repr__(self) -> str:
        return f"EnvSecretResolver(prefix={self.prefix!r})"


class StaticSecretResolver:
    """Secrets from a fixed mapping of credential name to value, for tests and embedding.

    Like ``EnvSecretResolver`` it ignores the Scope.
    """

    def __init__(self, mapping: Mapping[str, str]) -> None:
        """Resolve from a copy of ``mapping``."""
        self._secrets = dict(mapping)

    async def resolve(self, scope: Scope, name: str) -> str:
        """The value stored as ``name``.

        Raises:
            SecretNotFound: ``mapping`` has no such name.
        """
        try:
            return self._secrets[name]
        except KeyError:
            raise SecretNotFound(f"credential {name!r} is not configured") from None

    def __repr__(self) -> str:
        # The values must not reach a log line through a repr.
        return f"StaticSecretResolver(names={sorted(self._secrets)!r})"
