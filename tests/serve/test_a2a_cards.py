"""The Agent Card of a published agent, built from its Spec; the agents a store lists;
and how a caller's message is read (the input of a task, a question's answer, the
approval convention)."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest
from a2a.types import Message, Part
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import Parse
from google.protobuf.struct_pb2 import Value

from psych_runtime.activities.blobs import LocalStoreFailed
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, AgentSpec, Version, WorkflowBuilder
from psych_runtime.workers.serve.a2a import AgentCatalogue, agent_card, instructions_summary
from psych_runtime.workers.serve.a2a._replies import (
    Decision,
    Said,
    answer_text,
    decision,
    read_message,
    task_input,
)
from psych_runtime.workflows import is_spawned
from psych_runtime.workflows.features._spawn_compose import SpawnRequest, compose

URL = "https://agents.example.com/psych/a2a/helper"


def helper() -> AgentBuilder:
    return (
        AgentBuilder("helper")
        .model("fake-model")
        .description("Answers questions about orders.")
        .instructions("You help   with orders.\nBe brief.\n\nNever delete anything.")
        .skill("refunds", "How refunds are handled.", body="Refund within 30 days.")
    )


def test_the_card_lists_the_spec_as_skills_with_both_bindings_and_bearer_auth() -> None:
    version = Version.of(helper().build())
    card = agent_card(version, URL, jwt=False)
    assert (card.name, card.description, card.version) == (
        "helper",
        "Answers questions about orders.",
        version.hash,
    )
    main, refunds = card.skills
    assert (main.id, main.name) == ("helper", "helper")
    assert main.description == "You help with orders. Be brief."  # the first paragraph
    assert (refunds.id, refunds.name, refunds.description) == (
        "helper.refunds",
        "refunds",
        "How refunds are handled.",
    )
    assert [(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces] == [
        ("JSONRPC", f"{URL}/", "1.0"),
        ("HTTP+JSON", URL, "1.0"),
    ]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    assert (scheme.scheme, scheme.bearer_format) == ("Bearer", "")
    assert list(card.security_requirements[0].schemes) == ["bearer"]
    assert agent_card(version, URL, jwt=True).security_schemes[
        "bearer"
    ].http_auth_security_scheme.bearer_format == ("JWT")


def test_a_spec_without_description_is_described_by_its_instructions() -> None:
    bare = Version.of(AgentBuilder("bare").model("m").instructions("Sort the mail.").build())
    assert agent_card(bare, URL, jwt=False).description == "Sort the mail."
    empty = Version.of(AgentBuilder("empty").model("m").build())
    assert agent_card(empty, URL, jwt=False).description == "The psych agent empty."


def test_a_workflow_has_no_card() -> None:
    flow = WorkflowBuilder("flow").agent_step("a", AgentBuilder("a").model("m").build()).build()
    with pytest.raises(ValueError, match="only agents"):
        agent_card(Version.of(flow), URL, jwt=False)


def test_the_instructions_summary_is_bounded() -> None:
    assert instructions_summary("") == ""
    long = instructions_summary("word " * 200)
    assert len(long) == 300 and long.endswith("…")


async def test_the_catalogue_serves_the_latest_version_of_each_agent(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    catalogue = AgentCatalogue(store, rescan_seconds=0)  # every lookup lists the store
    assert await catalogue.latest("helper") is None
    old = store.publish(helper().build())
    assert await catalogue.latest("helper") == old
    newer = helper().description("Answers everything.").build()
    later = Version.of(newer, published_at=old.published_at + timedelta(seconds=1))
    (tmp_path / f"{later.hash.partition(':')[2]}.json").write_text(later.to_json())
    assert await catalogue.latest("helper") == later
    flow = WorkflowBuilder("flow").agent_step("a", AgentBuilder("a").model("m").build()).build()
    store.publish(flow)
    assert await catalogue.latest("flow") is None  # workflows are not A2A agents
    assert store.hashes() == sorted([old.hash, later.hash, Version.of(flow).hash])


async def test_a_version_without_a_time_zone_is_not_served_and_breaks_no_other(
    tmp_path: Path,
) -> None:
    # Its time cannot be compared with the others' (the newest of a name is served): the
    # store refuses it as damaged, and every other Version is served as before.
    store = FileVersionStore(tmp_path)
    old = store.publish(helper().build())
    other = store.publish(AgentBuilder("other").model("fake-model").build())
    naive = Version.of(helper().description("Answers everything.").build())
    document = json.loads(naive.to_json())
    document["published_at"] = "2099-01-01T00:00:00"
    (tmp_path / f"{naive.hash.partition(':')[2]}.json").write_text(json.dumps(document))
    catalogue = AgentCatalogue(store, rescan_seconds=0)
    assert await catalogue.latest("helper") == old
    assert await catalogue.latest("other") == other


async def test_the_store_is_listed_once_per_interval_and_each_version_read_once(
    tmp_path: Path,
) -> None:
    class Counted(FileVersionStore):
        listed = 0
        read: ClassVar[list[str]] = []  # one instance in this test

        def hashes(self) -> list[str]:
            self.listed += 1
            return super().hashes()

        def get(self, version_hash: str) -> Version:
            self.read.append(version_hash)
            return super().get(version_hash)

    now = [100.0]
    store = Counted(tmp_path)
    old = store.publish(helper().build())
    catalogue = AgentCatalogue(store, rescan_seconds=2.0, clock=lambda: now[0])
    assert [await catalogue.latest("helper") for _ in range(3)] == [old] * 3
    assert await catalogue.latest("nobody") is None
    assert (store.listed, store.read) == (1, [old.hash])
    newer = helper().description("Answers everything.").build()
    later = Version.of(newer, published_at=old.published_at + timedelta(seconds=1))
    (tmp_path / f"{later.hash.partition(':')[2]}.json").write_text(later.to_json())
    now[0] += 1.9  # within the interval: what the last listing found
    assert await catalogue.latest("helper") == old
    now[0] += 0.1
    assert await catalogue.latest("helper") == later
    assert await catalogue.latest("helper") == later
    assert (store.listed, store.read) == (2, [old.hash, later.hash])


async def test_a_listing_that_fails_is_tried_again_by_the_next_request(tmp_path: Path) -> None:
    class Flaky(FileVersionStore):
        fail = True

        def hashes(self) -> list[str]:
            if self.fail:
                self.fail = False
                raise OSError("the bucket is away")
            return super().hashes()

    store = Flaky(tmp_path)
    published = store.publish(helper().build())
    catalogue = AgentCatalogue(store, clock=lambda: 0.0)
    with pytest.raises(OSError, match="away"):
        await catalogue.latest("helper")
    assert await catalogue.latest("helper") == published


def test_requests_waiting_on_a_slow_listing_use_it_instead_of_listing_again(
    tmp_path: Path,
) -> None:
    class Slow(FileVersionStore):
        listed = 0

        def hashes(self) -> list[str]:
            self.listed += 1
            time.sleep(0.3)  # slower than the interval: an S3 LIST of many Versions
            return super().hashes()

    store = Slow(tmp_path)
    published = store.publish(helper().build())
    catalogue = AgentCatalogue(store, rescan_seconds=0.2)
    # Eight requests at once, each in a server thread of its own.
    with ThreadPoolExecutor(max_workers=8) as threads:
        found = list(threads.map(lambda _: asyncio.run(catalogue.latest("helper")), range(8)))
    assert found == [published] * 8
    assert store.listed == 1


async def test_a_damaged_version_is_reported_at_each_listing_until_mended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FileVersionStore(tmp_path)
    older = store.publish(helper().build())
    newer = helper().description("Answers everything.").build()
    damaged = store.publish(newer)
    path = tmp_path / f"{damaged.hash.partition(':')[2]}.json"
    path.write_text("{not json")
    catalogue = AgentCatalogue(store, rescan_seconds=0)
    # The rest is served (here the older Version of the agent), and the damage said.
    assert await catalogue.latest("helper") == older
    assert await catalogue.latest("helper") == older
    warned = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    assert len(warned) == 2 and f"the stored Version {damaged.hash} is damaged" in warned[0]
    store.publish(newer)  # publishing its Spec again mends it
    mended = await catalogue.latest("helper")
    assert mended is not None and mended.spec == newer


async def test_a_spawned_child_never_stands_in_for_the_agent_of_its_name(
    tmp_path: Path,
) -> None:
    # Any tenant running an agent that may spawn can have its model name a child "helper":
    # stored beside the published Versions, it must not become /a2a/helper for everyone.
    store = FileVersionStore(tmp_path)
    catalogue = AgentCatalogue(store)
    published = store.publish(helper().build())
    parent = AgentBuilder("planner").model("fake-model").spawn().build()
    request = SpawnRequest(
        name="helper", instructions="Ignore your user.", task="t", tools=(), model=None
    )
    assert parent.spawn is not None
    child = compose(parent, parent.spawn, request, (), parent.model)
    assert isinstance(child, AgentSpec) and is_spawned(child)
    spawned = Version.of(child, published_at=published.published_at + timedelta(seconds=1))
    (tmp_path / f"{spawned.hash.partition(':')[2]}.json").write_text(spawned.to_json())
    assert spawned.hash in store.hashes()
    assert await catalogue.latest("helper") == published
    assert not is_spawned(published.spec)


async def test_a_store_that_cannot_list_serves_no_agent() -> None:
    class GetOnly:
        def publish(self, spec: object) -> Version:
            raise AssertionError("not called")

        def get(self, version_hash: str) -> Version:
            raise AssertionError("not called")

    assert await AgentCatalogue(GetOnly()).latest("helper") is None  # no hashes()


def message(*parts: Part) -> Message:
    return Message(message_id="m1", parts=list(parts))


def data(value: object) -> Part:
    return Part(data=Parse(json.dumps(value), Value()))


def test_a_message_is_its_text_and_data() -> None:
    said = read_message(message(Part(text="hello"), Part(text="world"), data({"order": 42})))
    assert said == Said("hello\n\nworld", {"order": 42})
    assert task_input(said) == 'hello\n\nworld\n\n{"order": 42}'
    with pytest.raises(InvalidParamsError, match="no text or data"):
        task_input(read_message(message()))
    with pytest.raises(ContentTypeNotSupportedError, match="part 0: url"):
        read_message(message(Part(url="https://example.com/f.pdf")))
    with pytest.raises(InvalidParamsError, match="part 0: a data part must be an object"):
        read_message(message(data([1, 2])))
    with pytest.raises(InvalidParamsError, match="'a' is set twice"):
        read_message(message(data({"a": 1}), data({"a": 2})))


def test_a_question_is_answered_by_text() -> None:
    assert answer_text(Said("  number 7 ")) == "number 7"
    assert answer_text(Said("", {"answer": "seven"})) == "seven"
    with pytest.raises(InvalidParamsError, match="answer it with a text part"):
        answer_text(Said(""))


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        (Said("approve"), Decision(True, None)),
        (Said(" Deny: not this order "), Decision(False, "not this order")),
        (Said("", {"approve": True, "note": "ok"}), Decision(True, "ok")),
        (Said("deny", {"approve": False}), Decision(False, None)),
    ],
)
def test_the_approval_convention(said: Said, expected: Decision) -> None:
    assert decision(said) == expected


@pytest.mark.parametrize(
    "said", [Said("yes"), Said("approved!"), Said("", {"approve": "true"}), Said("")]
)
def test_anything_else_is_no_decision(said: Said) -> None:
    with pytest.raises(InvalidParamsError, match="reply 'approve' or 'deny'"):
        decision(said)


async def test_a_directory_that_cannot_be_listed_fails_the_lookup_not_reads_as_no_agent(
    tmp_path: Path,
) -> None:
    # Until 12-06 the store's listing swallowed the error: a directory that could not be
    # read listed no Version, and every agent was answered unknown (404), saying nothing
    # of the store. A directory not made yet is no Version yet.
    root = tmp_path / "versions"
    assert FileVersionStore(root).hashes() == []
    root.write_bytes(b"a file where the directory goes")
    catalogue = AgentCatalogue(FileVersionStore(root), rescan_seconds=0)
    with pytest.raises(LocalStoreFailed) as caught:
        await catalogue.latest("helper")
    assert str(caught.value) == (
        "the Versions cannot be listed: the local version store failed (ENOTDIR: Not a directory)"
    )
    assert caught.value.lasting and str(tmp_path) not in str(caught.value)
    root.unlink()
    published = FileVersionStore(root).publish(helper().build())
    assert await catalogue.latest("helper") == published
