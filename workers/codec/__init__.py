"""psych_runtime.workers.codec: encrypted payloads and blobs.

``PsychCodec`` (AES-256-GCM, a key per tenant) with its ``Keyring`` and ``KeyProvider``
port, ``KeyringBlobCipher`` for blobs, and the codec server the Temporal UI decodes with
(``psych codec-server``).
"""

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
from psych_runtime.workers.codec._server import add_codec_server_command

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
    "add_codec_server_command",
    "chain_codecs",
    "codec_from_env",
    "find_psych_codec",
]
