"""What the model activity reads of immutable blobs, kept by ref between its calls.

A blob's ref names its content, so what was read (or derived) from a ref never changes:
the Run's system prompt and its tool list, read by every model call of the Run, are read
and parsed once per worker (``ByRef``) instead of once per call. Bounded in entries and in
the bytes each entry came from, least recently used first out. Nothing here widens who
reads what: ``BlobStore.get`` takes a ref alone, so a ref already gave whoever holds it the
blob's content.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

_T = TypeVar("_T")

BY_REF_ENTRIES = 256
"""Refs kept: a worker's live Runs share few prompts and tool lists."""

BY_REF_BYTES = 16 * 1024 * 1024
"""Blob bytes kept: the values are counted as the blobs they came from (a parsed value
takes a few times that in memory). 256 entries alone would let a few large MCP catalogues
hold hundreds of megabytes."""


class ByRef(Generic[_T]):
    """Values derived from blobs, by ref: the most recently used kept, at most ``size`` of
    them and ``max_bytes`` in all (each put says how many bytes its value came from; one
    above a sixteenth of ``max_bytes`` is not kept)."""

    def __init__(self, size: int = BY_REF_ENTRIES, max_bytes: int = BY_REF_BYTES) -> None:
        if size < 1:
            raise ValueError(f"ByRef needs room for at least one entry, not {size}")
        if max_bytes < 16:  # a value may take a sixteenth: below 16, none could be kept
            raise ValueError(f"ByRef needs room for at least 16 bytes, not {max_bytes}")
        self._size = size
        self._max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[_T, int]] = OrderedDict()
        self._bytes = 0

    def get(self, ref: str) -> _T | None:
        """The value kept for ``ref`` (now the most recently used), or None."""
        item = self._items.get(ref)
        if item is None:
            return None
        self._items.move_to_end(ref)
        return item[0]

    def put(self, ref: str, value: _T, nbytes: int) -> None:
        """Keep ``value`` (derived from ``nbytes`` of blob) for ``ref``, dropping the least
        recently used past ``size`` entries or ``max_bytes``."""
        if nbytes > self._max_bytes // 16:
            return
        old = self._items.pop(ref, None)
        if old is not None:
            self._bytes -= old[1]
        self._items[ref] = (value, nbytes)
        self._bytes += nbytes
        while len(self._items) > self._size or self._bytes > self._max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self._bytes -= dropped

    @property
    def kept_bytes(self) -> int:
        """Bytes kept (as the puts counted them)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)
