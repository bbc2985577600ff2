"""psych_runtime.activities.tokens: the TokenStore port (OAuth tokens a fleet holds).

``TokenKey`` (tenant, principal, issuer, client id, resource), ``TokenStore``, and its
adapters: ``LocalTokenStore`` (a directory), ``S3TokenStore`` (an S3-compatible bucket),
``EncryptedTokenStore`` (records sealed with a ``BlobCipher``), ``TenantSealedTokens``
(sealed for each key's tenant, outside a Run), and the store a worker's
environment configures (``token_store_from_env``).
"""

from psych_runtime.activities.blobs import TenantCipher
from psych_runtime.activities.tokens._config import token_store_from_env
from psych_runtime.activities.tokens._s3 import S3TokenStore
from psych_runtime.activities.tokens._store import (
    Change,
    EncryptedTokenStore,
    LocalTokenStore,
    TenantSealedTokens,
    TokenKey,
    TokenStore,
    unsealed,
)

__all__ = [
    "Change",
    "EncryptedTokenStore",
    "LocalTokenStore",
    "S3TokenStore",
    "TenantCipher",
    "TenantSealedTokens",
    "TokenKey",
    "TokenStore",
    "token_store_from_env",
    "unsealed",
]
