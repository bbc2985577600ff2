"""A ``LocalBlobStore`` whose disk refuses a read or a write: ``LocalStoreFailed``, a
``StoreUnavailable`` naming the blob by ref, the store's kind and the errno, never the
store's path (logged instead), wherever it reaches a Run: a model call's failure, a
compaction's, a tool's outcome.

The disk refuses for real: a directory stands where the blob's file goes (``EISDIR``), or
a file where its shard directory goes (``ENOTDIR``, ``EEXIST``); the tests run as root,
so a permission bit would refuse nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import (
    LocalBlobStore,
    LocalStoreFailed,
    blob_key,
    blob_ref,
    canonical_json,
)
from psych_runtime.activities.contract import (
    MODEL_CALL_FAILED,
    ChatMessage,
    CompactInput,
    ErrorType,
    ModelFailure,
    TurnMark,
)
from psych_runtime.activities.model import CompactionActivities, Endpoint, ModelActivities
from psych_runtime.activities.model import ModelEndpoints as Endpoints
from psych_runtime.activities.model._compaction import SUMMARY_HEADER
from psych_runtime.activities.tools import store_outcome
from psych_runtime.specs import ModelRef, Scope, StoreUnavailable
from psych_runtime.testing import FakeModel, Reply
from tests.activities._calls import MODEL, call

ANSWER = "The answer, stored where a directory stands."


def stored_ref(message: ChatMessage) -> str:
    """The ref ``Conversations.put_message`` stores ``message`` under."""
    return blob_ref(canonical_json(message.model_dump(mode="json")))


def block(root: Path, ref: str) -> None:
    """A directory where the blob file of ``ref`` goes: its write and read fail EISDIR."""
    (root / blob_key(ref)).mkdir(parents=True)


def says_nothing_of(err: BaseException | None, root: Path) -> None:
    """No message along ``err``'s chain names ``root`` (what an activity's failure carries
    into the Run's history)."""
    while err is not None:
        assert str(root) not in str(err), err
        err = err.__cause__


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=(MODEL, "tiny")) as model:
        yield model


def activities(fake: FakeModel, store: LocalBlobStore, http: httpx.AsyncClient) -> ModelActivities:
    endpoints = Endpoints(default=Endpoint(fake.base_url, "sk-local-store-test"))
    return ModelActivities(endpoints=endpoints, blobs=store, http=http)


async def test_a_refused_write_names_the_ref_and_errno_never_the_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: os.open's IsADirectoryError, "[Errno 21] Is a directory: '<root>/ab/...'".
    root = tmp_path / "blobs"
    ref = blob_ref(b"data")
    block(root, ref)
    with caplog.at_level(logging.WARNING), pytest.raises(LocalStoreFailed) as caught:
        await LocalBlobStore(root).put(b"data")
    err = caught.value
    assert isinstance(err, StoreUnavailable)
    assert str(err) == (
        f"blob {ref} cannot be stored: the local blob store failed (EISDIR: Is a directory)"
    )
    assert (err.ref, err.errno_name, err.lasting) == (ref, "EISDIR", True)
    assert err.__cause__ is None and str(root) in err.detail
    logged = [r.getMessage() for r in caplog.records if "local blob store failed" in r.getMessage()]
    assert len(logged) == 1 and str(root) in logged[0], logged


async def test_a_refused_read_names_the_ref_and_errno_never_the_path(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    ref = blob_ref(b"data")
    root.mkdir()
    (root / blob_key(ref).split("/")[0]).write_bytes(b"a file where the shard goes")
    with pytest.raises(LocalStoreFailed) as caught:
        await LocalBlobStore(root).get(ref)
    assert str(caught.value) == (
        f"blob {ref} cannot be read: the local blob store failed (ENOTDIR: Not a directory)"
    )
    says_nothing_of(caught.value, root)


async def test_a_model_answer_not_stored_fails_the_call_by_ref(
    fake: FakeModel, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    root = tmp_path / "blobs"
    answer_ref = stored_ref(ChatMessage(role="assistant", content=ANSWER))
    block(root, answer_ref)
    fake.enqueue(Reply.text(ANSWER))
    acts = activities(fake, LocalBlobStore(root), http)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(acts.complete, call())
    error = caught.value
    assert error.type == MODEL_CALL_FAILED
    failure = ModelFailure.model_validate(error.details[0])
    assert failure.message == (
        f"model {MODEL}: blob {answer_ref} cannot be stored: the local blob store failed "
        "(EISDIR: Is a directory)"
    )
    assert not failure.transient  # a directory in the way stays in the way
    assert len(error.details) == 2  # the answer came, and was paid for
    says_nothing_of(error, root)


async def test_a_compaction_summary_not_stored_fails_by_ref(
    fake: FakeModel, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    root = tmp_path / "blobs"
    model = activities(fake, LocalBlobStore(root), http)
    head: str | None = None
    for messages in ([ChatMessage(role="user", content="a")], [answer_of("b"), user_of("c")]):
        refs = [await model.conversations.put_message(m) for m in messages]
        head = await model.conversations.append(head, refs)
    assert head is not None
    summary_ref = stored_ref(ChatMessage(role="user", content=SUMMARY_HEADER + "summed up"))
    block(root, summary_ref)
    fake.enqueue(Reply.text("summed up"), model="tiny")
    compact = CompactInput(
        run_id="r",
        turn=3,
        model="tiny",
        params=ModelRef(model=MODEL),
        context_ref=head,
        marks=(TurnMark(node=head, offset=1),),
        max_summary_tokens=77,
        scope=Scope(tenant="acme"),
    )
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(CompactionActivities(model).compact, compact)
    assert caught.value.type == MODEL_CALL_FAILED
    assert caught.value.message == (
        f"model tiny: blob {summary_ref} cannot be stored: the local blob store failed "
        "(EISDIR: Is a directory)"
    )
    says_nothing_of(caught.value, root)


def answer_of(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def user_of(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


async def test_a_tool_outcome_not_stored_names_the_ref(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    text = "the tool's result"
    message_ref = stored_ref(ChatMessage(role="tool", content=text, tool_call_id="c1"))
    block(root, message_ref)
    store = LocalBlobStore(root)

    async def outcome(once: bool) -> object:
        return await store_outcome(store, "c1", "ok", text, started=0.0, limit=None, once=once)

    with pytest.raises(LocalStoreFailed) as plain:
        await ActivityEnvironment().run(outcome, False)
    says_nothing_of(plain.value, root)
    with pytest.raises(ApplicationError) as once:
        await ActivityEnvironment().run(outcome, True)
    assert once.value.type == ErrorType.RESULT_NOT_KEPT
    assert once.value.message == (
        f"the tool ran, but its outcome (ok) could not be kept: blob {message_ref} cannot be "
        "stored: the local blob store failed (EISDIR: Is a directory)"
    )
    says_nothing_of(once.value, root)
