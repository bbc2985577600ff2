"""Content-addressed blobs: the BlobStore port, its local-directory default, its
encrypting wrapper, the errors a missing blob and a seal that does not open raise, and the
conversation chain stored in it.

A conversation is a chain of nodes ``{"parent": <ref or null>, "messages": [<ref>...]}``;
its head ref is all a model-call activity needs. Appending stores one node, so a call's
input stays the same size however long the Run is.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from temporalio.exceptions import ApplicationError

from psych_runtime.activities._durable_files import sweep_temporary
from psych_runtime.activities.blobs._disk import disk_answering
from psych_runtime.activities.blobs._recent import RECENT_BLOB_BYTES, RecentBlobs
from psych_runtime.activities.contract import ChatMessage, ErrorType, blob_ref, is_blob_ref
from psych_runtime.specs import AccessDenied, NotFound


class BlobNotFound(ApplicationError, NotFound):
    """Nothing is stored under a blob ref, or the ref is not one (``ref`` names it).

    It is a ``NotFound``, as the BlobStore port promises, and also a non-retryable
    Temporal ``ApplicationError`` of type ``BlobNotFound``: a blob that is missing now
    stays missing, so an activity it escapes from fails at once instead of being retried
    until its timeout (the retry policies live in the workflow, which cannot know every
    error a store raises).

    Attributes:
        ref: the ref that was asked for.
        damaged: something is stored under ``ref`` but its bytes hash otherwise (torn, or
            changed behind the store's back), so it is not handed out; a put of the data
            mends it.
    """

    def __init__(self, ref: str, message: str, *, damaged: bool = False) -> None:
        super().__init__(message, ref, type=ErrorType.BLOB_NOT_FOUND, non_retryable=True)
        self.ref = ref
        self.damaged = damaged


class BlobSealRefused(ApplicationError, AccessDenied):
    """A blob is stored under ``ref`` but its seal does not open with the reader's keys
    (``EncryptedBlobStore``): sealed under keys this worker does not hold (the fleet's
    workers have other codec keys, or a key's secret changed under its id), stored unsealed
    before encryption was turned on, or altered where the store does not check a blob
    against its ref (the shipped stores do: an altered blob is ``BlobNotFound``, damaged).

    An ``AccessDenied``, as the ``BlobCipher`` port promises, and a non-retryable Temporal
    ``ApplicationError`` of type ``BlobSealRefused``: no retry opens it, so an activity it
    escapes from fails at once, naming the ref. The message names the ref only, never the
    cipher's words (key ids, the tenants keys are for: the operator's), which are its
    ``__cause__``.

    Attributes:
        ref: the ref that was read.
    """

    def __init__(self, ref: str) -> None:
        message = (
            f"blob {ref} is in the blob store but its seal does not open with this worker's "
            "keys: it was sealed under keys this worker does not hold (the workers' codec "
            "keys differ, or a key's secret changed under its id), stored unsealed before "
            "encryption was turned on, or altered"
        )
        super().__init__(message, ref, type=ErrorType.BLOB_SEAL_REFUSED, non_retryable=True)
        self.ref = ref


def unreadable_blob(err: BaseException) -> str | None:
    """What a reader inside a Run says of ``err`` when it is a blob it cannot read: missing
    (``BlobNotFound``), its seal refused (``BlobSealRefused``) or its bytes damaged
    (``BlobNotFound.damaged``), naming the ref and never the store's location (a directory,
    a bucket's key: the store's own words, for the worker's log) or a key; None for any
    other error."""
    if isinstance(err, BlobSealRefused):
        return err.message
    if not isinstance(err, BlobNotFound):
        return None
    if err.damaged:
        return (
            f"blob {err.ref} is in the blob store but damaged: its bytes no longer match "
            "their ref (cut short by a crash, or altered)"
        )
    if not is_blob_ref(err.ref):
        return err.message  # "not a blob ref": the ref as given, no location
    return (
        f"blob {err.ref} is not in the blob store (deleted, or this worker reads another "
        "store than the one that wrote it)"
    )


def blob_key(ref: str) -> str:
    """The relative path of ``ref`` in a store: ``<2 hex>/<62 hex>``.

    Every store lays blobs out alike, so a directory of a ``LocalBlobStore`` copied into
    an ``S3BlobStore``'s prefix (``aws s3 sync``) is a valid store.

    Raises:
        BlobNotFound: ``ref`` is not ``sha256:`` and 64 lowercase hex digits.
    """
    # Refs reach here from payloads and callers, so a ref becomes a path only once it is
    # exactly a sha256 digest: anything else (`../`, `/`, upper case) could name a file
    # outside the root, or another object than a blob.
    if not is_blob_ref(ref):
        raise BlobNotFound(ref, f"not a blob ref (sha256: and 64 lowercase hex digits): {ref!r}")
    digest = ref.removeprefix("sha256:")
    return f"{digest[:2]}/{digest[2:]}"


@runtime_checkable
class BlobStore(Protocol):
    """Port: content-addressed bytes. ``put`` is idempotent; refs are content hashes."""

    async def put(self, data: bytes) -> str:
        """Store ``data``; return its ref."""
        ...

    async def get(self, ref: str) -> bytes:
        """The bytes stored under ``ref``.

        Raises:
            NotFound: nothing is stored under ``ref`` (the shipped stores raise its
                subclass ``BlobNotFound``, naming the ref).
        """
        ...


@runtime_checkable
class KnowsRefs(Protocol):
    """A BlobStore that can say which ref ``put`` would give, without storing anything."""

    def ref_of(self, data: bytes) -> str | None:
        """The ref ``put(data)`` returns (None: not known without storing)."""
        ...


def ref_without_storing(blobs: BlobStore, data: bytes) -> str | None:
    """The ref ``blobs.put(data)`` would return, when the store can tell without storing
    (``KnowsRefs``); None for a store that cannot (``data`` must then be stored).

    The same test as ``isinstance(blobs, KnowsRefs)``, whose protocol check costs about
    5 us a call (every tool call makes one)."""
    ref_of: Callable[[bytes], str | None] | None = getattr(blobs, "ref_of", None)
    return None if ref_of is None else ref_of(data)


class LocalBlobStore:
    """Blobs as files ``<root>/<2 hex>/<62 hex>`` (embedded default).

    Workers on one machine (or sharing a volume) may share a root. A new blob is created
    in place, exclusively (one file creation, no temporary file and rename); a put that
    finds the file already there reads it, and replaces it atomically (temporary file and
    rename) unless it holds exactly the data (a writer that died mid-write, or one still
    writing, leaves it short). A ref leaves ``put`` only once its file is whole, so a
    reader given a ref reads the whole blob. Files are not synced to disk (a sync per
    blob would cost a turn more than the rest of its store work): after a host crash a
    blob written just before may be short or empty, and a read of such a file raises
    ``BlobNotFound`` saying it is damaged (every read from disk is checked against its
    ref) instead of handing out wrong bytes.
    """

    def __init__(
        self, root: str | os.PathLike[str], *, recent_bytes: int = RECENT_BLOB_BYTES
    ) -> None:
        """A store in the directory ``root``, keeping the blobs it wrote or read last in
        memory up to ``recent_bytes`` (``RecentBlobs``; 0: every read opens its file)."""
        self.root = Path(root)
        self._root = os.fspath(self.root)
        self._shards: set[str] = set()
        """Shard directories this store made or found: made once, not stat'ed per put."""
        self._recent = RecentBlobs(recent_bytes)

    def _path(self, ref: str) -> str:
        return os.path.join(self._root, blob_key(ref))

    def ref_of(self, data: bytes) -> str:
        """The ref ``put(data)`` returns: the hash of its bytes (``KnowsRefs``)."""
        return blob_ref(data)

    async def put(self, data: bytes) -> str:
        """Store ``data``; return its ref."""
        ref = blob_ref(data)
        with disk_answering(f"blob {ref} cannot be stored", ref, self._root):
            self._write(self._path(ref), data, ref)
        self._recent.keep(ref, data)
        return ref

    async def get(self, ref: str) -> bytes:
        """The bytes stored under ``ref``.

        Raises:
            BlobNotFound: nothing is stored under ``ref``, or it is not a blob ref.
        """
        path = self._path(ref)  # checks the ref first, kept or not
        data = self._recent.get(ref)
        if data is not None:
            return data
        with disk_answering(f"blob {ref} cannot be read", ref, self._root):
            try:
                data = _read(path)
            except FileNotFoundError:
                raise BlobNotFound(ref, f"no blob {ref} in {self.root}") from None
        if blob_ref(data) != ref:
            # Cut short or emptied: written before a host crash and never synced (a put
            # of the same bytes replaces it), or changed behind the store's back. Never
            # handed out, nor kept as whole.
            raise BlobNotFound(
                ref,
                f"the blob file of {ref} in {self.root} is damaged: its bytes hash otherwise",
                damaged=True,
            )
        self._recent.keep(ref, data)
        return data

    def _write(self, path: str, data: bytes, ref: str) -> None:
        # Local-disk calls of a few microseconds, made in place (as Path's were): a thread
        # hop would cost more than the write.
        shard = os.path.dirname(path)
        if shard not in self._shards:
            os.makedirs(shard, exist_ok=True)
            self._shards.add(shard)
        try:
            fd = os.open(path, _CREATE_NEW, 0o600)
        except FileExistsError:
            # Whole when this store last wrote or read it (a blob never changes): no need
            # to read it back to know.
            if self._recent.get(ref) is not None or _holds(path, data):
                return
            self._replace(shard, path, data)
            return
        except FileNotFoundError:  # the shard was removed since
            self._shards.discard(shard)
            self._write(path, data, ref)
            return
        _write_and_close(fd, data, unlink_if_failed=path)

    def _replace(self, shard: str, path: str, data: bytes) -> None:
        """Write ``path`` whole through a temporary file and a rename (atomic); the
        shard's temporary files that writers killed mid-write left are swept first."""
        sweep_temporary(shard, _TEMPORARY)
        fd, tmp = _exclusive_temp(shard)
        try:
            _write_and_close(fd, data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _exclusive_temp(shard: str) -> tuple[int, str]:
    """A new temporary file in ``shard``, opened exclusively: ``.put-<token>-<n>``.

    The token is random per process (a restarted or containerised worker often has the
    same pid as one before it, or as another container sharing the root) and the counter
    is shared by every store of the process, so names do not repeat; a name found taken
    anyway (a file a killed writer left) is skipped, not an error. Cheaper than mkstemp's
    random name per file, and as exclusive.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for _ in range(100):
        tmp = os.path.join(shard, f"{_TEMPORARY}{_PUT_TOKEN}-{next(_PUT_COUNTER)}")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
        except FileNotFoundError:  # the shard was removed since: make it again
            os.makedirs(shard, exist_ok=True)
            return os.open(tmp, flags, 0o600), tmp
    raise FileExistsError(f"100 temporary names taken in {shard}: is another writer looping?")


_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL
_TEMPORARY = ".put-"


def _write_and_close(fd: int, data: bytes, *, unlink_if_failed: str | None = None) -> None:
    """Write all of ``data`` to the new file ``fd`` and close it: plain ``os.write``, with no
    file object around it (one a blob cost about 6 us; every turn writes three).

    ``unlink_if_failed``: the path ``fd`` was created at, removed if the write fails, but
    only while it is still this file: another process that found it short may have put a
    whole copy in its place (a rename), whose ref it has handed out already.
    """
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        if unlink_if_failed is not None:
            _unlink_if_same(unlink_if_failed, os.fstat(fd))
        raise
    finally:
        os.close(fd)


def _unlink_if_same(path: str, created: os.stat_result) -> None:
    with contextlib.suppress(FileNotFoundError):
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == (created.st_dev, created.st_ino):
            os.unlink(path)


def _holds(path: str, data: bytes) -> bool:
    """Whether the file at ``path`` holds exactly ``data`` (False if it went meanwhile)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(data) + 1) == data
    except FileNotFoundError:
        return False


def _new_token() -> None:
    global _PUT_TOKEN
    _PUT_TOKEN = secrets.token_hex(6)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


_PUT_COUNTER = itertools.count()
"""Numbers the temporary files of ``LocalBlobStore.put`` in this process."""
_PUT_TOKEN = secrets.token_hex(6)
"""This process's part of those names; a forked child draws its own."""
os.register_at_fork(after_in_child=_new_token)


def canonical_json(value: object) -> bytes:
    """``value`` as canonical JSON bytes (sorted keys, no spaces): what a stored blob holds."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Conversations:
    """Reads and appends conversation chains in a BlobStore, caching resolved heads.

    The cache maps a head ref to its full message list. A head appended with its
    messages is cached at once, so a Run's next call on this worker reads nothing; any
    other head is walked back to the nearest cached one (one node, on a worker that
    served the turn before). The cache holds messages as read, by ref, for every tenant:
    with an ``EncryptedBlobStore`` a ref is the hash of bytes sealed for one tenant, so
    only that tenant's Runs were ever given it (as for the model activity's caches of
    system prompts and tool lists by ref).
    """

    def __init__(self, blobs: BlobStore, *, cache_size: int = 256) -> None:
        self.blobs = blobs
        self._cache: OrderedDict[str, tuple[ChatMessage, ...]] = OrderedDict()
        self._cache_size = cache_size

    async def put_message(self, message: ChatMessage) -> str:
        """Store one message; return its ref."""
        return await self.blobs.put(_stored_form(message))

    async def get_message(self, ref: str) -> ChatMessage:
        """Read one stored message."""
        return ChatMessage.model_validate_json(await self.blobs.get(ref))

    async def append(
        self,
        head: str | None,
        message_refs: list[str],
        messages: Sequence[ChatMessage] | None = None,
    ) -> str | None:
        """Store a node extending ``head`` with ``message_refs``; return the new head.

        ``messages``: the messages ``message_refs`` name (what ``put_message`` stored
        them from), when the caller holds them. With ``head``'s messages cached (the
        caller has just read them; or no ``head``), the new head's are cached too, as a
        reader of the store would find them, so ``messages`` of it reads nothing.

        Raises:
            ValueError: ``messages`` and ``message_refs`` differ in length.
        """
        if messages is not None and len(messages) != len(message_refs):
            raise ValueError(
                f"{len(messages)} messages for {len(message_refs)} message refs: "
                "each ref names one message"
            )
        if not message_refs:
            return head
        new = await self.blobs.put(canonical_json({"parent": head, "messages": message_refs}))
        if messages is not None:
            base = () if head is None else self._cache.get(head)
            if base is not None:
                self._remember(new, base + tuple(_as_stored(m) for m in messages))
        return new

    async def messages(self, head: str | None) -> tuple[ChatMessage, ...]:
        """Every message of the conversation ending at ``head``, oldest first."""
        # Walk back to the nearest cached node (iteratively: chains are as long as Runs).
        pending: list[tuple[str, list[str]]] = []
        cursor = head
        base: tuple[ChatMessage, ...] = ()
        while cursor is not None:
            if cursor in self._cache:
                self._cache.move_to_end(cursor)
                base = self._cache[cursor]
                break
            node = json.loads(await self.blobs.get(cursor))
            pending.append((cursor, node["messages"]))
            cursor = node["parent"]
        result = base
        for ref, message_refs in reversed(pending):
            result = result + tuple([await self.get_message(m) for m in message_refs])
            self._remember(ref, result)
        return result

    def cached(self, head: str) -> tuple[ChatMessage, ...] | None:
        """The messages of ``head`` if they are kept (as ``messages`` would return them),
        else None: nothing is read."""
        return self._cache.get(head)

    def _remember(self, ref: str, messages: tuple[ChatMessage, ...]) -> None:
        self._cache[ref] = messages
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


def _as_stored(message: ChatMessage) -> ChatMessage:
    """``message`` as a reader of the store gets it back. The same message, unless a
    provider's fields ride on it: JSON keeps their values but not all of them as they were
    (a NaN or an infinity is stored as null) nor their keys' order (stored sorted)."""
    if message.provider_fields is None and all(
        call.provider_fields is None for call in message.tool_calls
    ):
        return message
    return ChatMessage.model_validate_json(_stored_form(message))


def _stored_form(message: ChatMessage) -> bytes:
    """What ``Conversations.put_message`` stores of ``message``."""
    return canonical_json(message.model_dump(mode="json"))
