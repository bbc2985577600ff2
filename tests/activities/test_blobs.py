"""LocalBlobStore: content-addressed files under its root, and nowhere else; the
conversation chain's cache of heads."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from psych_runtime.activities.blobs import (
    BlobNotFound,
    Conversations,
    EncryptedBlobStore,
    LocalBlobStore,
    LocalStoreFailed,
    RecentBlobs,
    blob_key,
    ref_without_storing,
)
from psych_runtime.activities.blobs import _store as _blobs
from psych_runtime.activities.contract import ChatMessage, ToolCallRequest, blob_ref
from psych_runtime.specs import NotFound


async def test_put_then_get_stores_under_the_root_by_digest(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ref = await store.put(b"hello")
    assert ref == blob_ref(b"hello")
    digest = ref.removeprefix("sha256:")
    assert (tmp_path / "blobs" / digest[:2] / digest[2:]).read_bytes() == b"hello"
    assert await store.get(ref) == b"hello"


def _traversal(target: str) -> str:
    # 64 characters that the old length-only check took for a digest: `..` as the fan-out
    # directory, then `./` padding and the file name.
    digest = ".." + "./" * ((62 - len(target)) // 2) + target
    assert len(digest) == 64, len(digest)
    return "sha256:" + digest


@pytest.mark.parametrize(
    "ref",
    [
        _traversal("passwd"),
        "sha256:" + "A" * 64,  # upper case: another file on a case-sensitive disk
        "sha256:" + "g" * 64,
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 64 + "\n",
        "md5:" + "a" * 64,
        "../../etc/passwd",
    ],
)
async def test_a_ref_that_is_not_a_lowercase_sha256_digest_is_refused(
    tmp_path: Path, ref: str
) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "passwd").write_text("root:x:0:0")
    store = LocalBlobStore(tmp_path / "r" / "blobs")
    (tmp_path / "r" / "blobs").mkdir()
    with pytest.raises(NotFound, match="not a blob ref"):
        await store.get(ref)
    with pytest.raises(NotFound, match="not a blob ref"):
        store._path(ref)  # the one path both get and put go through


async def test_put_writes_each_blob_once_and_survives_its_shard_being_removed(
    tmp_path: Path,
) -> None:
    store = LocalBlobStore(tmp_path)
    ref = await store.put(b"one")
    assert await store.put(b"one") == ref
    shard = tmp_path / blob_key(ref).split("/")[0]
    assert [p.name for p in shard.iterdir()] == [blob_key(ref).split("/")[1]]  # no temp left
    # The store remembers the shard it made; removed behind its back, it is made again.
    (shard / blob_key(ref).split("/")[1]).unlink()
    shard.rmdir()
    assert await store.put(b"one") == ref
    assert await store.get(ref) == b"one"


async def test_a_temporary_name_left_taken_is_skipped(tmp_path: Path) -> None:
    # A writer killed between creating its temporary file and renaming it leaves the name
    # taken; the next writer to draw it (a restarted worker) moves on to another name.
    # (A temporary file is drawn only to replace a torn blob: one is left here.)
    store = LocalBlobStore(tmp_path)
    ref = blob_ref(b"two")
    shard = tmp_path / blob_key(ref).split("/")[0]
    shard.mkdir()
    (tmp_path / blob_key(ref)).write_bytes(b"t")
    upcoming = next(_blobs._PUT_COUNTER) + 1
    for n in range(upcoming, upcoming + 3):
        (shard / f".put-{_blobs._PUT_TOKEN}-{n}").write_bytes(b"left by a killed writer")
    assert await store.put(b"two") == ref
    assert await store.get(ref) == b"two"


async def test_a_new_blob_is_created_in_place_without_a_temporary_file(tmp_path: Path) -> None:
    # One file creation per blob (issue 27): no temporary name drawn, no rename.
    store = LocalBlobStore(tmp_path)
    before = next(_blobs._PUT_COUNTER)
    ref = await store.put(b"three")
    assert next(_blobs._PUT_COUNTER) == before + 1
    assert await store.get(ref) == b"three"
    assert (tmp_path / blob_key(ref)).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("left", [b"", b"fou", b"four and more"])
async def test_a_torn_blob_is_never_read_and_the_next_put_of_its_data_replaces_it(
    tmp_path: Path, left: bytes
) -> None:
    # A writer that died mid-write, or a host crash before the file reached the disk,
    # leaves it short, empty or (in principle) wrong: a read refuses it (it does not hash
    # to its ref) and keeps nothing in memory; the next put of that data finds it, checks
    # it, and replaces it whole.
    store = LocalBlobStore(tmp_path)
    ref = blob_ref(b"four")
    path = tmp_path / blob_key(ref)
    path.parent.mkdir()
    path.write_bytes(left)
    with pytest.raises(BlobNotFound, match="damaged") as caught:
        await store.get(ref)
    assert caught.value.damaged
    assert await store.put(b"four") == ref
    assert path.read_bytes() == b"four"
    assert await LocalBlobStore(tmp_path).get(ref) == b"four"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


async def test_a_failed_write_leaves_a_whole_copy_another_process_put_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A creates the file and its write fails (a full disk); meanwhile B found it short and
    # renamed a whole copy into place, and handed out the ref. A removes only its own file.
    store = LocalBlobStore(tmp_path)
    ref = blob_ref(b"five")
    path = tmp_path / blob_key(ref)

    def failing_write(fd: int, data: object) -> int:
        whole = path.parent / "b-copy"
        whole.write_bytes(b"five")
        os.replace(whole, path)  # B's atomic replacement
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(LocalStoreFailed, match=r"\(ENOSPC: No space left on device\)") as full:
        await store.put(b"five")
    assert not full.value.lasting  # space may be freed
    monkeypatch.undo()
    assert path.read_bytes() == b"five"
    # A file of its own that it failed to write, A does remove.
    monkeypatch.setattr(os, "write", _no_space)
    with pytest.raises(LocalStoreFailed, match="No space"):
        await store.put(b"six")
    monkeypatch.undo()
    assert not (tmp_path / blob_key(blob_ref(b"six"))).exists()


def _no_space(fd: int, data: object) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_store_reads_back_what_it_wrote_or_read_last_from_memory(tmp_path: Path) -> None:
    # A blob never changes under its ref, so the store answers a recent ref without its
    # file: shown here by removing the file behind its back.
    writer = LocalBlobStore(tmp_path)
    ref = await writer.put(b"kept")
    reader = LocalBlobStore(tmp_path)
    assert await reader.get(ref) == b"kept"  # read from the file, then kept
    (tmp_path / blob_key(ref)).unlink()
    assert await writer.get(ref) == b"kept"
    assert await reader.get(ref) == b"kept"
    with pytest.raises(NotFound, match="no blob"):
        await LocalBlobStore(tmp_path, recent_bytes=0).get(ref)
    with pytest.raises(NotFound, match="not a blob ref"):  # checked before memory is asked
        await writer.get("sha256:../x")


def test_recent_blobs_drop_the_least_recently_used_beyond_their_bound() -> None:
    recent = RecentBlobs(max_bytes=64)
    recent.keep("a", b"1234")
    recent.keep("b", b"1234")
    recent.keep("c", b"12345")  # over a sixteenth of the bound: not kept
    assert recent.get("c") is None
    assert len(recent) == 2
    for n in range(15):  # 4 bytes each: 64 bytes hold 16 blobs, so one goes
        assert recent.get("a") == b"1234"  # used: the last to go
        recent.keep(f"x{n}", b"1234")
    assert recent.get("a") == b"1234"
    assert recent.get("b") is None  # the least recently used went first
    assert len(recent) == 16
    with pytest.raises(ValueError, match="max_bytes"):
        RecentBlobs(max_bytes=-1)


async def test_a_put_of_a_recent_blob_whose_file_exists_does_not_read_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path)
    ref = await store.put(b"once")

    def read_back(path: str, data: bytes) -> bool:
        raise AssertionError(f"read {path} back")

    monkeypatch.setattr(_blobs, "_holds", read_back)
    assert await store.put(b"once") == ref  # whole when it wrote it: a blob never changes
    with pytest.raises(AssertionError, match=r"read .* back"):
        await LocalBlobStore(tmp_path).put(b"once")  # a store that never saw it checks


class _Opaque:
    """A BlobStore that cannot name a ref without storing (no ``ref_of``)."""

    def __init__(self) -> None:
        self.stored: dict[str, bytes] = {}

    async def put(self, data: bytes) -> str:
        ref = blob_ref(data)
        self.stored[ref] = data
        return ref

    async def get(self, ref: str) -> bytes:
        return self.stored[ref]


class _Reversing:
    """A cipher that seals by reversing (enough to tell sealed bytes from plain)."""

    def seal(self, data: bytes) -> bytes:
        return data[::-1]

    def open(self, sealed: bytes) -> bytes:
        return sealed[::-1]


async def test_ref_without_storing_names_the_ref_put_gives_only_when_the_store_can(
    tmp_path: Path,
) -> None:
    local = LocalBlobStore(tmp_path)
    assert ref_without_storing(local, b"abc") == blob_ref(b"abc")
    with pytest.raises(NotFound):  # nothing stored
        await local.get(blob_ref(b"abc"))
    opaque = _Opaque()
    assert ref_without_storing(opaque, b"abc") is None
    assert not opaque.stored
    # A sealing store names the ref of the sealed bytes when its inner store can, which is
    # what its put returns; over a store that cannot, it cannot either.
    sealed = EncryptedBlobStore(local, _Reversing())
    assert ref_without_storing(sealed, b"abc") == blob_ref(b"cba") == await sealed.put(b"abc")
    assert ref_without_storing(EncryptedBlobStore(opaque, _Reversing()), b"abc") is None


class _Counting(_Opaque):
    """An in-memory store that counts its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, ref: str) -> bytes:
        self.gets += 1
        return await super().get(ref)


async def test_a_head_appended_with_its_messages_is_read_back_without_the_store() -> None:
    store = _Counting()
    conversations = Conversations(store)
    question = ChatMessage(role="user", content="Refund order 42")
    first = await conversations.append(None, [await conversations.put_message(question)])
    assert await conversations.messages(first) == (question,)  # walked: one node, one message
    assert store.gets == 2
    answer = ChatMessage(role="assistant", content="Done.")
    head = await conversations.append(first, [await conversations.put_message(answer)], [answer])
    assert await conversations.messages(head) == (question, answer)
    assert store.gets == 2  # remembered at append: no node read, no message parsed
    # What is remembered is what a reader without the cache finds in the store.
    assert await Conversations(store).messages(head) == (question, answer)


async def test_a_head_appended_after_an_uncached_one_is_walked_as_before() -> None:
    store = _Counting()
    writer = Conversations(store)
    question = ChatMessage(role="user", content="Refund order 42")
    first = await writer.append(None, [await writer.put_message(question)])
    answer = ChatMessage(role="assistant", content="Done.")
    # Another worker's conversations: it never read `first`, so it cannot know its messages.
    other = Conversations(store)
    head = await other.append(first, [await other.put_message(answer)], [answer])
    before = store.gets
    assert await other.messages(head) == (question, answer)
    assert store.gets > before


async def test_an_append_whose_messages_do_not_match_its_refs_is_refused() -> None:
    conversations = Conversations(_Opaque())
    ref = await conversations.put_message(ChatMessage(role="user", content="hi"))
    with pytest.raises(ValueError, match="2 messages for 1 message refs"):
        await conversations.append(None, [ref], [ChatMessage(role="user", content="hi")] * 2)


async def test_a_head_remembered_at_append_holds_what_a_reader_of_the_store_finds() -> None:
    store = _Counting()
    conversations = Conversations(store)
    question = ChatMessage(role="user", content="Refund order 42")
    first = await conversations.append(None, [await conversations.put_message(question)])
    await conversations.messages(first)
    # A provider's fields as they came: keys unsorted, a value JSON cannot hold (NaN).
    answer = ChatMessage(
        role="assistant",
        content="Done.",
        provider_fields={"z": 1, "a": float("nan")},
        tool_calls=(
            ToolCallRequest(id="c1", name="t", arguments="{}", provider_fields={"b": 1, "a": 2}),
        ),
    )
    head = await conversations.append(first, [await conversations.put_message(answer)], [answer])
    cached = await conversations.messages(head)
    fresh = await Conversations(store).messages(head)

    def seen(messages: tuple[ChatMessage, ...]) -> list[str]:
        return [m.model_dump_json() for m in messages]  # key order counts here

    assert seen(cached) == seen(fresh)
    assert cached[1].provider_fields == {"a": None, "z": 1}
