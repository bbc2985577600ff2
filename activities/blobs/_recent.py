"""The blobs a store wrote or read last, kept in memory: a blob never changes under its ref.

A turn reads back what the turns before it wrote (a conversation node, the messages it
names, a tool's result): from memory, a read costs neither a file open (whose GIL hand-back
stalls every other activity of the worker's event loop) nor a bucket round trip. Bounded by
bytes; a blob larger than a sixteenth of the bound is not kept.
"""

from __future__ import annotations

from collections import OrderedDict

RECENT_BLOB_BYTES = 16 * 1024 * 1024
"""The default bound of a store's recent blobs, in bytes."""


class RecentBlobs:
    """Blob bytes by ref, least recently used dropped first, at most ``max_bytes`` in all
    (0: nothing is kept)."""

    def __init__(self, max_bytes: int = RECENT_BLOB_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, not {max_bytes}")
        self.max_bytes = max_bytes
        self._largest = max_bytes // 16
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0

    def get(self, ref: str) -> bytes | None:
        """The bytes kept under ``ref``, or None."""
        data = self._blobs.get(ref)
        if data is not None:
            self._blobs.move_to_end(ref)
        return data

    def keep(self, ref: str, data: bytes) -> None:
        """Keep ``data`` (stored under ``ref``), dropping the least recently used to fit."""
        if len(data) > self._largest or ref in self._blobs:
            return
        self._blobs[ref] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, dropped = self._blobs.popitem(last=False)
            self._bytes -= len(dropped)

    def drop(self, ref: str) -> None:
        """Forget ``ref`` (nothing happens if it is not kept)."""
        data = self._blobs.pop(ref, None)
        if data is not None:
            self._bytes -= len(data)

    @property
    def kept_bytes(self) -> int:
        """Bytes kept."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._blobs)
