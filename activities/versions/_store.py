"""The file-backed VersionStore: one JSON document per Version hash in a directory.

Writes go to a temporary file that is then hard-linked into place, so a half-written
Version is never visible and two concurrent publishers of one Spec agree on the first
``published_at`` (the link fails for the second, which then reads the first).
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from psych_runtime.activities._durable_files import sweep_temporary, sync_directory
from psych_runtime.activities.blobs import disk_answering
from psych_runtime.specs import (
    AgentSpec,
    NotFound,
    SpecError,
    StoreDamaged,
    Version,
    WorkflowSpec,
)

STORE_KIND = "local version store"
"""How a ``LocalStoreFailed`` of this store names it (never where it is)."""
_TEMPORARY = ".publish-"
"""A document being written, before it takes its name (a killed publisher's is swept)."""
_PUBLISHED_AT = re.compile(rb'"published_at"\s*:\s*"([^"]{1,64})"')


def repaired(spec: AgentSpec | WorkflowSpec, damaged: bytes, stored_at: datetime) -> Version:
    """The Version that replaces a damaged document of ``spec``: its ``published_at`` as
    the document still says it, else when the store wrote it (``stored_at``)."""
    found = _PUBLISHED_AT.search(damaged)
    if found is not None:
        try:
            said = datetime.fromisoformat(found.group(1).decode())
        except ValueError:
            pass
        else:
            # A time after the store wrote the document is damage too (never the newest);
            # a bucket's LastModified has whole seconds.
            if said.tzinfo is not None and said <= stored_at + timedelta(seconds=1):
                return Version.of(spec, published_at=said)
    return Version.of(spec, published_at=stored_at)


def stored_version(document: bytes, version_hash: str) -> Version:
    """The Version a store read under ``version_hash``, re-verified.

    Raises:
        StoreDamaged: the document does not parse, holds another Version (named by its
            hash, not by where it is stored: API callers are shown it), or its
            ``published_at`` has no time zone (psych writes UTC with its offset; a time
            without one cannot be ordered among the others: which is the newest of a name).
    """
    try:
        version = Version.from_json(document, source=version_hash)
    except SpecError as err:
        raise StoreDamaged(f"the stored Version {version_hash} is damaged: {err}") from err
    if version.hash != version_hash:
        raise StoreDamaged(
            f"the stored Version {version_hash} is damaged: it holds Version {version.hash}"
        )
    if version.published_at.tzinfo is None:
        said = _PUBLISHED_AT.search(document)
        shown = said.group(1).decode(errors="replace") if said else version.published_at
        raise StoreDamaged(
            f"the stored Version {version_hash} is damaged: its published_at {str(shown)!r} "
            "has no time zone"
        )
    return version


_DIGEST = re.compile(r"[0-9a-f]{64}")


def is_digest(text: str) -> bool:
    """Whether ``text`` is a Version's hex digest (64 lowercase hex digits)."""
    return _DIGEST.fullmatch(text) is not None


def digest_of(version_hash: str) -> str:
    """The hex digest of ``version_hash`` (what a store names its document by).

    Raises:
        SpecError: it is not ``sha256:`` and 64 lowercase hex digits (what ``Version.of``
            makes): no Version could be stored under it.
    """
    algorithm, _, digest = version_hash.partition(":")
    if algorithm != "sha256" or not is_digest(digest):
        raise SpecError(
            f"not a Version hash: {version_hash!r} (a hash is sha256: and 64 lowercase hex digits)"
        )
    return digest


class FileVersionStore:
    """Versions stored as ``<root>/<hex digest>.json``; publishing is idempotent."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, version_hash: str) -> Path:
        return self.root / f"{digest_of(version_hash)}.json"

    def publish(self, spec: AgentSpec | WorkflowSpec) -> Version:
        """Store ``spec``, or return the Version already stored with its hash.

        Raises:
            LocalStoreFailed: the disk refused (a file on the directory's path, a directory
                another user owns, a read-only mount, a full disk): a ``StoreUnavailable``
                naming the Version by hash and the errno, the directory only in its
                ``detail`` and the log (a Run spawning a child publishes through this, and
                its failure reaches the model and the Run's record).
        """
        version = Version.of(spec)
        path = self._path(version.hash)
        what = f"Version {version.hash} cannot be published"
        with disk_answering(what, version.hash, os.fspath(self.root), kind=STORE_KIND):
            damaged = False
            if path.exists():
                try:
                    return self.get(version.hash)
                except StoreDamaged:
                    # Written anew below, in place of the damaged file, with the time it was
                    # first published: "the newest of its name" must not change by a repair.
                    damaged = True
                    first = datetime.fromtimestamp(path.stat().st_mtime, UTC)
                    version = repaired(spec, path.read_bytes(), first)
            self.root.mkdir(parents=True, exist_ok=True)
            stored = self._write(version, path, replace=damaged)
        return version if stored else self.get(version.hash)

    def _write(self, version: Version, path: Path, *, replace: bool) -> bool:
        """Write ``version`` at ``path`` whole (over a damaged file when ``replace``);
        False: another publisher's file took the name first."""
        sweep_temporary(self.root, _TEMPORARY)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=_TEMPORARY, suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(version.to_json())
                handle.flush()
                os.fsync(handle.fileno())
            try:
                if replace:
                    os.replace(tmp, path)  # whole or not at all
                    tmp = ""
                else:
                    os.link(tmp, path)
            except FileExistsError:
                return False
            sync_directory(self.root)  # the name too: a hash handed out stays found
        finally:
            if tmp:
                os.unlink(tmp)
        return True

    def hashes(self) -> list[str]:
        """The hash of every stored Version, sorted (read off the file names: what lists
        the published agents, ``psych serve``'s A2A cards); none while the directory does
        not exist (nothing published yet).

        Raises:
            LocalStoreFailed: the directory cannot be listed (a file on its path, one
                another user owns, an I/O error), as ``publish`` says: a listing that read
                empty would serve no agent, saying nothing of why.
        """
        what = "the Versions cannot be listed"
        with disk_answering(what, "", os.fspath(self.root), kind=STORE_KIND):
            try:
                with os.scandir(self.root) as entries:
                    names = [entry.name for entry in entries]
            except FileNotFoundError:
                return []
        digests = (name.removesuffix(".json") for name in names if name.endswith(".json"))
        return sorted(f"sha256:{d}" for d in digests if is_digest(d))

    def get(self, version_hash: str) -> Version:
        """The stored Version with this hash, re-verified on read.

        Raises:
            NotFound: nothing is stored under this hash.
            StoreDamaged: the stored document does not read back as written.
            LocalStoreFailed: the disk refused the read (as ``publish`` says).
        """
        path = self._path(version_hash)
        what = f"Version {version_hash} cannot be read"
        with disk_answering(what, version_hash, os.fspath(self.root), kind=STORE_KIND):
            try:
                document = path.read_bytes()
            except FileNotFoundError:
                # Shown to API callers as is: it names no path of the store.
                raise NotFound(f"no Version {version_hash}") from None
        return stored_version(document, version_hash)
