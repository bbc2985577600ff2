"""What was read or derived from blobs, kept in memory: a blob never changes under its ref.

A turn reads back what the turns before it wrote (a conversation node, the messages it
names, a tool's result): from memory, a read costs neither a file open (whose GIL hand-back
stalls every other activity of the worker's event loop) nor a bucket round trip
(``RecentBlobs``, the stores' own). What a worker derives from a blob (a parsed tool list,
an encoded conversation) is kept the same way (``RecentByRef``). Bounded by bytes; a value
larger than a sixteenth of the bound is not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

_T = TypeVar("_T")

RECENT_BLOB_BYTES = 16 * 1024 * 1024
"""The default bound of a store's recent blobs (and of ``RecentByRef``), in bytes."""


class RecentByRef(Generic[_T]):
    """Values by ref, least recently used dropped first, at most ``max_bytes`` in all as
    each keep counts its value (0: nothing is kept)."""

    def __init__(self, max_bytes: int = RECENT_BLOB_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, not {max_bytes}")
        self.max_bytes = max_bytes
        self._largest = max_bytes // 16
        self._items: OrderedDict[str, tuple[_T, int]] = OrderedDict()
        self._bytes = 0

    def get(self, ref: str) -> _T | None:
        """The value kept under ``ref`` (now the most recently used), or None."""
        item = self._items.get(ref)
        if item is None:
            return None
        self._items.move_to_end(ref)
        return item[0]

    def keep_sized(self, ref: str, value: _T, nbytes: int) -> None:
        """Keep ``value`` under ``ref``, counted as ``nbytes`` (replacing what was kept there),
        dropping the least recently used to fit."""
        if nbytes > self._largest:
            return
        old = self._items.pop(ref, None)
        if old is not None:
            self._bytes -= old[1]
        self._items[ref] = (value, nbytes)
        self._bytes += nbytes
        while self._bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self._bytes -= dropped

    def drop(self, ref: str) -> None:
        """Forget ``ref`` (nothing happens if it is not kept)."""
        old = self._items.pop(ref, None)
        if old is not None:
            self._bytes -= old[1]

    @property
    def kept_bytes(self) -> int:
        """Bytes kept (as the keeps counted them)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)


class RecentBlobs(RecentByRef[bytes]):
    """Blob bytes by ref, each counted as its length."""

    def keep(self, ref: str, data: bytes) -> None:
        """Keep ``data`` (stored under ``ref``), dropping the least recently used to fit."""
        self.keep_sized(ref, data, len(data))
