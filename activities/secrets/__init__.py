"""psych_runtime.activities.secrets: credentials, by name, and keeping them out of results.

The ``SecretResolver`` port with its environment and static defaults, and the ``Redactor``
every activity passes upstream text through before returning or logging it.
"""

from psych_runtime.activities.secrets._redact import Redactor
from psych_runtime.activities.secrets._secrets import (
    EnvSecretResolver,
    SecretNotFound,
    SecretResolver,
    StaticSecretResolver,
    resolve_secret,
)

__all__ = [
    "EnvSecretResolver",
    "Redactor",
    "SecretNotFound",
    "SecretResolver",
    "StaticSecretResolver",
    "resolve_secret",
]
