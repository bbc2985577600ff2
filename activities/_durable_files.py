"""Writing a small file so that it survives a host crash, not only a process's death: its
bytes synced (``os.fsync``) before it takes its name, the directory synced after (for
records written rarely: tokens, Versions; never per turn); and sweeping the temporary
files a writer killed mid-write left behind."""

from __future__ import annotations

import contextlib
import os
import time

STALE_TEMPORARY_SECONDS = 3600.0
"""A temporary file older than this was left by a writer that died: no write of a small
record takes an hour, so a live writer's file is never swept."""


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Flush the directory ``path``'s entries (a name just created, renamed or linked in
    it) to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep_temporary(directory: str | os.PathLike[str], prefix: str) -> int:
    """Remove the files in ``directory`` whose names start with ``prefix`` and that were
    last written over ``STALE_TEMPORARY_SECONDS`` ago (temporary files of writers killed
    before their rename); how many. Called by the writers that make them, on the rare
    paths that write through a temporary file, so nothing a store leaves grows forever."""
    stale_before = time.time() - STALE_TEMPORARY_SECONDS
    removed = 0
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        return 0
    with entries:
        for entry in entries:
            if not entry.name.startswith(prefix):
                continue
            with contextlib.suppress(FileNotFoundError):  # another sweeper took it
                if entry.stat(follow_symlinks=False).st_mtime < stale_before:
                    os.unlink(entry.path)
                    removed += 1
    return removed
