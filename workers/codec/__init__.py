"""psych_runtime.workers.codec: encrypted payloads and blobs.

``PsychCodec`` (AES-256-GCM, a key per tenant) with its ``Keyring`` and ``KeyProvider``
port, ``KeyringBlobCipher`` for blobs, and the codec server the Temporal UI decodes with
(``psych codec-server``).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psych_runtime.workers.codec._blob_cipher import KeyringBlobCipher
    from psych_runtime.workers.codec._codec import (
        PsychCodec,
        chain_codecs,
        codec_from_env,
        find_psych_codec,
    )
    from psych_runtime.workers.codec._keys import (
        ENV_KEY_FILE,
        ENV_KEYS,
        EnvKeyProvider,
        FileKeyProvider,
        Key,
        KeyProvider,
        Keyring,
    )
    from psych_runtime.workers.codec._server import cmd_codec_server

_HOMES = {
    "ENV_KEYS": "psych_runtime.workers.codec._keys",
    "ENV_KEY_FILE": "psych_runtime.workers.codec._keys",
    "EnvKeyProvider": "psych_runtime.workers.codec._keys",
    "FileKeyProvider": "psych_runtime.workers.codec._keys",
    "Key": "psych_runtime.workers.codec._keys",
    "KeyProvider": "psych_runtime.workers.codec._keys",
    "Keyring": "psych_runtime.workers.codec._keys",
    "KeyringBlobCipher": "psych_runtime.workers.codec._blob_cipher",
    "PsychCodec": "psych_runtime.workers.codec._codec",
    "chain_codecs": "psych_runtime.workers.codec._codec",
    "cmd_codec_server": "psych_runtime.workers.codec._server",
    "codec_from_env": "psych_runtime.workers.codec._codec",
    "find_psych_codec": "psych_runtime.workers.codec._codec",
}
"""Where each public name lives, imported on first use: ``psych`` imports this package
for its command line, which needs neither cryptography nor the Temporal SDK's protobufs."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next lookup does not come here
    return value


__all__ = [
    "ENV_KEYS",
    "ENV_KEY_FILE",
    "EnvKeyProvider",
    "FileKeyProvider",
    "Key",
    "KeyProvider",
    "Keyring",
    "KeyringBlobCipher",
    "PsychCodec",
    "chain_codecs",
    "cmd_codec_server",
    "codec_from_env",
    "find_psych_codec",
]
