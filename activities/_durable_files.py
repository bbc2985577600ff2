"""Writing a small file so that it survives a host crash, not only a process's death: its
bytes synced (``os.fsync``) before it takes its name, the directory synced after (for
records written rarely: tokens, Versions; never per turn)."""

from __future__ import annotations

import os


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Flush the directory ``path``'s entries (a name just created, renamed or linked in
    it) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
