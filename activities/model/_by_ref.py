"""What the model activity reads of immutable blobs, kept by ref between its calls.

A blob's ref names its content, so what was read (or derived) from a ref never changes:
the Run's system prompt and its tool list, read by every model call of the Run, are read
and parsed once per worker (``ByRef``) instead of once per call. Bounded, least recently
used first out. Nothing here widens who reads what: ``BlobStore.get`` takes a ref alone,
so a ref already gave whoever holds it the blob's content.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

_T = TypeVar("_T")

BY_REF_ENTRIES = 256
"""Refs kept: a worker's live Runs share few prompts and tool lists."""


class ByRef(Generic[_T]):
    """Values derived from blobs, by ref; the ``size`` most recently used kept."""

    def __init__(self, size: int = BY_REF_ENTRIES) -> None:
        if size < 1:
            raise ValueError(f"ByRef needs room for at least one entry, not {size}")
        self._size = size
        self._items: OrderedDict[str, _T] = OrderedDict()

    def get(self, ref: str) -> _T | None:
        """The value kept for ``ref`` (now the most recently used), or None."""
        value = self._items.get(ref)
        if value is not None:
            self._items.move_to_end(ref)
        return value

    def put(self, ref: str, value: _T) -> None:
        """Keep ``value`` for ``ref``, dropping the least recently used past ``size``."""
        self._items[ref] = value
        self._items.move_to_end(ref)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
