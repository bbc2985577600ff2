"""Blob refs: what one is (``BlobRef``, ``sha256:`` and 64 hex digits), how data gets one
(``blob_ref``), and its compact wire form, for the payloads a Run sends on every turn.

A ``BlobRef`` is ``sha256:`` and 64 hex digits (71 characters); a model call and a tool
call carry about seven of them per turn. On the wire of the newer payload classes
(``SlimModelCallInput``, ``SlimModelCallResult``, ``SlimToolOutcome``) a ref travels as ``~`` and
the 43 base64url characters of its 32 digest bytes (44 characters), and is read back to
the same ``sha256:<hex>`` value. So Python only ever sees the one form: blob store keys,
records, ``read_tool_output`` handles and the older payloads do not change. Reading accepts
both forms, so a payload written with full refs (by hand, or by an older writer of the
same class) still decodes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Annotated

from pydantic import BeforeValidator, Field, PlainSerializer

_BLOB_REF = re.compile(r"sha256:[0-9a-f]{64}")
BlobRef = Annotated[str, Field(pattern=f"^{_BLOB_REF.pattern}$")]
"""The content hash of a stored blob."""


def is_blob_ref(value: str) -> bool:
    """Whether ``value`` is a ``BlobRef``: ``sha256:`` and 64 lowercase hex digits."""
    return _BLOB_REF.fullmatch(value) is not None


def blob_ref(data: bytes) -> str:
    """The ref of ``data``: ``"sha256:" + hex digest``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


WIRE_PREFIX = "~"
"""Marks the compact form: neither ``sha256:`` nor a base64url character starts with it."""
_HEX_PREFIX = "sha256:"
_WIRE_REF = re.compile(r"~[A-Za-z0-9_-]{43}")


_WIRE_OF: dict[str, str] = {}
"""``sha256:<hex>`` -> its ``~<base64url>``, as ``to_wire`` computed it (so always the
canonical form)."""
_REF_OF: dict[str, str] = {}
"""``~<base64url>`` -> ``sha256:<hex>``, for every compact ref converted either way.

A turn converts about eight refs each way, most of them ones this process has just
converted the other way (the workflow writes a model call's refs, the activity reads
them; a tool's outcome, the other way round): a conversion costs 3-4 us, a lookup 0.1."""

_KNOWN_MOST = 4096
"""Entries each table keeps; past it a table starts over (it only costs recomputing)."""


def _keep(table: dict[str, str], key: str, value: str) -> None:
    if len(table) >= _KNOWN_MOST:
        table.clear()
    table[key] = value


def to_wire(ref: str) -> str:
    """``sha256:<hex>`` as ``~<base64url of the digest, unpadded>``.

    Raises:
        ValueError: ``ref`` is not ``sha256:`` and 64 lowercase hex digits.
    """
    wire = _WIRE_OF.get(ref)
    if wire is not None:
        return wire
    if not is_blob_ref(ref):
        raise ValueError(f"not a blob ref (sha256: and 64 lowercase hex digits): {ref!r}")
    digest = bytes.fromhex(ref.removeprefix(_HEX_PREFIX))
    wire = WIRE_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")
    _keep(_WIRE_OF, ref, wire)
    _keep(_REF_OF, wire, ref)
    return wire


def from_wire(value: object) -> object:
    """A ref in either form as ``sha256:<hex>``; anything else is returned unchanged for
    the field's own validation to reject (a message object, a malformed string).

    Raises:
        ValueError: ``value`` has the compact prefix but is not 43 base64url characters.
    """
    if not isinstance(value, str) or not value.startswith(WIRE_PREFIX):
        return value
    ref = _REF_OF.get(value)
    if ref is not None:
        return ref
    if not _WIRE_REF.fullmatch(value):
        raise ValueError(
            f"not a compact blob ref ({WIRE_PREFIX} and 43 base64url characters): {value!r}"
        )
    # 43 base64url characters and one "=" always decode, to 32 bytes.
    ref = _HEX_PREFIX + base64.urlsafe_b64decode(value[1:] + "=").hex()
    _keep(_REF_OF, value, ref)
    return ref


WireRef = Annotated[BlobRef, BeforeValidator(from_wire), PlainSerializer(to_wire, when_used="json")]
"""A ``BlobRef`` that is ``sha256:<hex>`` in Python and ``~<base64url>`` in JSON."""
