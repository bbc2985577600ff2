"""Push configurations and watchers under concurrent requests in one ``psych serve``
process: no change is lost, and a task has one watcher (``workers/serve/a2a/_push*.py``).

The store under test yields to the event loop inside every read and write, as a store on
a disk or a bucket does, so each read-change-write interleaves with the others unless the
store keeps them apart.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from a2a.server.events.event_queue import Event
from a2a.types import Task, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.converter import DataConverter

from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.activities.telemetry import instrument, uninstrument
from psych_runtime.activities.tokens import LocalTokenStore, TenantSealedTokens, TokenKey
from psych_runtime.specs import Scope
from psych_runtime.workers import Key, Keyring, PsychCodec
from psych_runtime.workers._worker_checks import tenant_sealed_tokens
from psych_runtime.workers.serve.a2a import (
    PUSH_ISSUER,
    MemoryTokenStore,
    PushRegistry,
    PushStore,
    Watched,
)
from tests._upstream import Answer, Upstream, dripping

SCOPE = Scope(tenant="acme", principal="alice")


class SlowTokenStore(MemoryTokenStore):
    """A TokenStore in memory that lets other tasks run inside each read and write."""

    async def get(self, key: TokenKey) -> bytes | None:
        found = await super().get(key)
        await asyncio.sleep(0.001)
        return found

    async def put(self, key: TokenKey, record: bytes) -> None:
        await asyncio.sleep(0.001)
        await super().put(key, record)


def config(url: str, config_id: str = "") -> TaskPushNotificationConfig:
    made = TaskPushNotificationConfig(url=url)
    if config_id:
        made.id = config_id
    return made


def add(config_id: str) -> Callable[[dict[str, TaskPushNotificationConfig]], bool]:
    def change(configs: dict[str, TaskPushNotificationConfig]) -> bool:
        configs[config_id] = config(f"http://127.0.0.1:9/{config_id}", config_id)
        return True

    return change


async def test_concurrent_changes_of_one_task_all_land() -> None:
    store = PushStore(SlowTokenStore())
    await asyncio.gather(*(store.change("acme", "run-1", add(f"c{i}")) for i in range(20)))
    assert sorted(await store.configs("acme", "run-1")) == sorted(f"c{i}" for i in range(20))


async def test_a_refused_change_writes_nothing() -> None:
    tokens = SlowTokenStore()
    store = PushStore(tokens)
    await store.change("acme", "run-1", add("kept"))

    def refuse(configs: dict[str, TaskPushNotificationConfig]) -> bool:
        configs.clear()
        raise InvalidParamsError("no")

    with pytest.raises(InvalidParamsError):
        await store.change("acme", "run-1", refuse)
    assert list(await store.configs("acme", "run-1")) == ["kept"]


async def test_removing_the_last_config_deletes_the_record() -> None:
    tokens = SlowTokenStore()
    store = PushStore(tokens)
    await store.change("acme", "run-1", add("only"))
    await store.change("acme", "run-1", lambda configs: configs.pop("only") is not None)
    key = TokenKey("acme", None, PUSH_ISSUER, "run-1", "configs")
    assert await tokens.get(key) is None


async def test_concurrent_index_changes_all_land() -> None:
    store = PushStore(SlowTokenStore())
    entries = [Watched("acme", None, f"run-{i}", "p1", float(i)) for i in range(20)]
    await asyncio.gather(*(store.watch([entry]) for entry in entries))
    assert sorted(w.workflow_id for w in await store.watched()) == sorted(
        e.workflow_id for e in entries
    )
    await asyncio.gather(*(store.unwatch("acme", f"run-{i}", "p1") for i in range(0, 20, 2)))
    assert sorted(w.workflow_id for w in await store.watched()) == sorted(
        f"run-{i}" for i in range(1, 20, 2)
    )


class Forever:
    """Events of tasks that never end (their watchers run until closed)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def events(self, workflow_id: str) -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            self.started.append(workflow_id)
            await asyncio.Event().wait()
            yield Task()  # never reached: makes this an async generator

        return follow()


def registry(tokens: SlowTokenStore, lease_seconds: float = 30.0) -> PushRegistry:
    return PushRegistry(
        store=PushStore(tokens),
        lease_seconds=lease_seconds,
        owner="this-process",
    )


async def test_concurrent_registrations_keep_every_webhook_and_start_one_watcher() -> None:
    tokens = SlowTokenStore()
    pushes = registry(tokens)
    tasks = Forever()
    try:
        kept = await asyncio.gather(
            *(
                pushes.register(
                    SCOPE,
                    "run-1",
                    config(f"http://127.0.0.1:9/hook-{i}"),
                    events=lambda: tasks.events("run-1"),
                )
                for i in range(8)
            )
        )
        assert sorted(c.id for c in await pushes.list(SCOPE, "run-1")) == sorted(c.id for c in kept)
        await asyncio.sleep(0.01)  # the watcher's task runs
        assert tasks.started == ["run-1"]
    finally:
        await pushes.aclose()


async def test_one_beat_writes_every_watched_task_and_closing_hands_them_over() -> None:
    tokens = SlowTokenStore()
    pushes = registry(tokens, lease_seconds=0.3)
    tasks = Forever()
    try:
        for i in range(5):
            await pushes.register(
                SCOPE,
                f"run-{i}",
                config("http://127.0.0.1:9/hook"),
                events=functools.partial(tasks.events, f"run-{i}"),
            )
        # Each written when it was registered (or by a beat meanwhile): the next beat writes
        # every one of them.
        registered = {w.workflow_id: w.beat for w in await pushes.store.watched()}

        async def beaten() -> list[Watched]:
            while True:
                index = await pushes.store.watched()
                if all(w.beat > registered[w.workflow_id] for w in index):
                    return index
                await asyncio.sleep(0.02)

        index = await asyncio.wait_for(beaten(), timeout=10)
        assert sorted(w.workflow_id for w in index) == [f"run-{i}" for i in range(5)]
        # One beat wrote them all (a beat per task would stamp each with its own time).
        assert len({w.beat for w in index}) == 1
    finally:
        await pushes.aclose()
    record = await tokens.get(TokenKey("-", None, PUSH_ISSUER, "-", "watched"))
    assert record is not None
    handed_over = json.loads(record)
    assert len(handed_over) == 5
    assert {(e["owner"], e["beat"]) for e in handed_over} == {("this-process", 0.0)}


async def test_no_watcher_starts_after_close() -> None:
    pushes = registry(SlowTokenStore())
    tasks = Forever()
    await pushes.aclose()
    await pushes.register(
        SCOPE, "run-late", config("http://127.0.0.1:9/hook"), events=lambda: tasks.events("x")
    )
    await asyncio.sleep(0.01)
    assert tasks.started == []
    assert [c.url for c in await pushes.list(SCOPE, "run-late")] == ["http://127.0.0.1:9/hook"]
    # Named in the index with a stale beat: the next process that looks takes it over.
    assert [(w.workflow_id, w.beat) for w in await pushes.store.watched()] == [("run-late", 0.0)]


class FailingPuts(SlowTokenStore):
    """Fails every write of one kind of record (``resource``), as a full disk would."""

    def __init__(self, resource: str) -> None:
        super().__init__()
        self.resource = resource

    async def put(self, key: TokenKey, record: bytes) -> None:
        if key.resource == self.resource:
            raise OSError(f"no space left writing {key.resource}")
        await super().put(key, record)


async def test_a_failed_index_write_keeps_no_webhook() -> None:
    # Kept but in no process's index, a webhook would be listed and never delivered.
    pushes = registry(FailingPuts("watched"))
    tasks = Forever()
    try:
        with pytest.raises(OSError, match="watched"):
            await pushes.register(
                SCOPE, "run-1", config("http://127.0.0.1:9/hook"), events=lambda: tasks.events("x")
            )
        assert await pushes.list(SCOPE, "run-1") == []
    finally:
        await pushes.aclose()


async def test_a_failed_webhook_write_leaves_the_task_followed_by_the_process_named() -> None:
    pushes = registry(FailingPuts("configs"))
    tasks = Forever()
    try:
        with pytest.raises(OSError, match="configs"):
            await pushes.register(
                SCOPE, "run-1", config("http://127.0.0.1:9/hook"), events=lambda: tasks.events("r")
            )
        assert [w.owner for w in await pushes.store.watched()] == ["this-process"]
        await asyncio.sleep(0.01)  # the watcher's task runs
        assert tasks.started == ["r"]
    finally:
        await pushes.aclose()


async def test_a_task_that_ends_is_forgotten_and_one_that_fails_is_kept() -> None:
    tokens = SlowTokenStore()
    pushes = registry(tokens)
    release = asyncio.Event()

    def ends() -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            await release.wait()
            if release.is_set():
                return
            yield Task()  # never reached: makes this an async generator

        return follow()

    def fails() -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            await release.wait()
            if release.is_set():
                raise RuntimeError("following the Run failed")
            yield Task()  # never reached

        return follow()

    hook = config("http://127.0.0.1:9/hook")
    try:
        await pushes.register(SCOPE, "run-ends", hook, events=ends)
        await pushes.register(SCOPE, "run-fails", hook, events=fails)
        assert len(await pushes.list(SCOPE, "run-ends")) == 1
        release.set()

        async def settled() -> set[str]:
            while True:
                watched = {w.workflow_id for w in await pushes.store.watched()}
                if "run-ends" not in watched:
                    return watched
                await asyncio.sleep(0.01)

        # The ended task: its webhooks (and their credentials) and its index entry go.
        assert await asyncio.wait_for(settled(), timeout=10) == {"run-fails"}
        assert await pushes.list(SCOPE, "run-ends") == []
        ended_key = TokenKey("acme", None, PUSH_ISSUER, "run-ends", "configs")
        assert await tokens.get(ended_key) is None
        # A watcher that failed may not have pushed the end: kept, to be resumed.
        assert len(await pushes.list(SCOPE, "run-fails")) == 1
    finally:
        await pushes.aclose()


async def test_a_webhook_registered_while_the_end_is_pushed_gets_it_before_it_goes() -> None:
    tokens = SlowTokenStore()
    pushes = registry(tokens)
    posted: list[tuple[str, str]] = []
    end = Task(id="run-late")

    async def post(
        _http: object, _tenant: str, made: TaskPushNotificationConfig, body: dict[str, Any]
    ) -> None:
        posted.append((made.id, next(iter(body))))
        if made.id == "first":  # the caller's second webhook lands while the end is pushed
            await pushes.store.change(SCOPE.tenant, "run-late", add("second"))

    pushes._post = post  # type: ignore[method-assign,assignment]

    def ends() -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            yield end

        return follow()

    try:
        await pushes.register(
            SCOPE, "run-late", config("http://127.0.0.1:9/a", "first"), events=ends
        )

        async def forgotten() -> None:
            while True:
                if not await pushes.store.watched() and not await pushes.list(SCOPE, "run-late"):
                    return
                await asyncio.sleep(0.01)

        await asyncio.wait_for(forgotten(), timeout=10)
        # Both got the end; neither was deleted before it did.
        assert posted == [("first", "task"), ("second", "task")]
    finally:
        await pushes.aclose()


def files_bytes(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


async def test_with_encryption_configs_are_sealed_for_their_tenant_and_the_index_is_not(
    tmp_path: Path,
) -> None:
    # psych serve keeps them outside any Run: sealed for the tenant each record names.
    codec = PsychCodec(Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"}))
    client = SimpleNamespace(data_converter=DataConverter(payload_codec=codec))
    plain = LocalTokenStore(tmp_path)
    tokens = tenant_sealed_tokens(client, plain)  # type: ignore[arg-type]
    assert isinstance(tokens, TenantSealedTokens)
    store = PushStore(tokens)
    hook = config("http://127.0.0.1:9/hook", "c1")
    hook.token = "webhook-secret-1234"

    def keep(configs: dict[str, TaskPushNotificationConfig]) -> bool:
        configs["c1"] = hook
        return True

    await store.change("acme", "run-1", keep)
    await store.watch([Watched("acme", "alice", "run-1", "p1", 1.0)])
    assert (await store.configs("acme", "run-1"))["c1"].token == "webhook-secret-1234"
    assert [w.workflow_id for w in await store.watched()] == ["run-1"]
    on_disk = files_bytes(tmp_path)
    assert b"webhook-secret" not in on_disk
    assert b'"workflow_id": "run-1"' in on_disk  # the index: no secret, no one tenant's
    plain_client = SimpleNamespace(data_converter=DataConverter())
    assert tenant_sealed_tokens(plain_client, plain) is plain  # type: ignore[arg-type]


class Shared(SlowTokenStore):
    """One store two processes' registries share; a change of webhooks can be held."""

    def __init__(self, records: dict[TokenKey, bytes]) -> None:
        super().__init__()
        self._records = records
        self.hold: asyncio.Event | None = None

        self.hold_index: asyncio.Event | None = None
        self.holding_index = asyncio.Event()

    async def get(self, key: TokenKey) -> bytes | None:
        if key.resource == "configs" and self.hold is not None:
            await self.hold.wait()
        return await super().get(key)

    async def put(self, key: TokenKey, record: bytes) -> None:
        if key.resource == "watched" and self.hold_index is not None:
            self.holding_index.set()
            await self.hold_index.wait()
        await super().put(key, record)


async def until(done: Callable[[], Awaitable[bool]]) -> None:
    """Wait (10 s at most) until ``done`` says so."""

    async def poll() -> None:
        while True:
            if await done():
                return
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout=10)


class TwoProcesses:
    """Two ``psych serve`` processes' registries over one store, recording who was posted
    to, and a task that ends once ``release`` is set."""

    def __init__(self) -> None:
        records: dict[TokenKey, bytes] = {}
        self.one_tokens, self.two_tokens = Shared(records), Shared(records)
        self.one = PushRegistry(store=PushStore(self.one_tokens), owner="one")
        self.two = PushRegistry(store=PushStore(self.two_tokens), owner="two")
        self.posted: list[str] = []
        self.release = asyncio.Event()

        async def post(
            _: object, _tenant: str, made: TaskPushNotificationConfig, body: dict[str, Any]
        ) -> None:
            self.posted.append(made.id)

        self.one._post = self.two._post = post  # type: ignore[method-assign,assignment]

    def ends(self) -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            await self.release.wait()
            yield Task(id="run-1")

        return follow()

    async def register(self, at: PushRegistry, config_id: str) -> None:
        url = f"http://127.0.0.1:9/{config_id}"
        await at.register(SCOPE, "run-1", config(url, config_id), events=self.ends)

    async def left_the_index(self) -> bool:
        return not await self.one.store.watched()

    async def forgotten(self) -> bool:
        return not await self.one.list(SCOPE, "run-1") and await self.left_the_index()

    async def aclose(self) -> None:
        self.one_tokens.hold_index = None
        await self.one.aclose()
        await self.two.aclose()


async def test_a_webhook_stored_as_the_process_named_forgets_the_ended_task_gets_its_end() -> None:
    # Process two sees process one named for the task, so it starts no watcher; its change
    # of the webhooks runs only after process one pushed the end, forgot the task and left
    # the index. The webhook must still get the end, and not stay stored with nobody to
    # deliver it (and its credentials kept for ever).
    both = TwoProcesses()
    try:
        await both.register(both.one, "first")
        both.two_tokens.hold = asyncio.Event()
        registering = asyncio.create_task(both.register(both.two, "second"))
        await asyncio.sleep(0.05)  # two has read the index and holds before its change
        both.release.set()  # the task ends: one pushes the end, forgets it, leaves the index
        await until(both.left_the_index)
        both.two_tokens.hold.set()
        await registering
        await until(both.forgotten)
        assert both.posted == ["first", "second"]
    finally:
        await both.aclose()


async def test_a_webhook_stored_as_the_process_named_leaves_the_index_gets_its_end() -> None:
    # Process two registers while process one, whose watcher has pushed the end, is
    # leaving the index: two still sees one named (so starts no watcher) and stores its
    # webhook after one's last read of them. One reads them once more after it left.
    both = TwoProcesses()
    try:
        await both.register(both.one, "first")
        both.one_tokens.hold_index = asyncio.Event()
        both.release.set()  # the task ends: one pushes the end, then holds leaving the index
        await asyncio.wait_for(both.one_tokens.holding_index.wait(), timeout=10)
        await both.register(both.two, "second")
        assert not both.two._watching(("acme", "run-1"))  # one is still named
        both.one_tokens.hold_index.set()
        await until(both.forgotten)
        assert both.posted == ["first", "second"]
    finally:
        await both.aclose()


async def test_an_ended_watcher_leaves_the_index_entry_of_a_new_one_here() -> None:
    tokens = SlowTokenStore()
    pushes = registry(tokens)
    again = Forever()

    async def post(
        _http: object, _tenant: str, made: TaskPushNotificationConfig, body: dict[str, Any]
    ) -> None:
        if made.id == "first":  # a webhook lands while the end is pushed: it gets it late
            await pushes.store.change(SCOPE.tenant, "run-1", add("late"))
        if made.id == "late":  # the watcher has ended: a registration here starts a new one
            await pushes.register(
                SCOPE, "run-1", config("http://127.0.0.1:9/b"), events=lambda: again.events("x")
            )

    pushes._post = post  # type: ignore[method-assign,assignment]

    def ends() -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            yield Task(id="run-1")

        return follow()

    async def restarted() -> bool:
        return again.started == ["x"]

    try:
        await pushes.register(SCOPE, "run-1", config("http://127.0.0.1:9/a", "first"), events=ends)
        await until(restarted)
        await asyncio.sleep(0.05)  # the ended watcher finishes
        # The new watcher's entry stays: without it, a crash before the next beat would
        # leave the task in no process's index.
        assert [(w.workflow_id, w.owner) for w in await pushes.store.watched()] == [
            ("run-1", "this-process")
        ]
    finally:
        await pushes.aclose()


async def test_no_task_is_taken_over_after_close() -> None:
    tokens = SlowTokenStore()
    pushes = registry(tokens)
    stale = Watched("acme", "alice", "run-1", "gone-process", 0.0)
    await pushes.store.watch([stale])
    followed: list[str] = []

    def resumed(scope: Scope, workflow_id: str) -> AsyncIterator[Event]:
        followed.append(workflow_id)
        return Forever().events(workflow_id)

    await pushes.aclose()
    await pushes._take_over(resumed)
    assert followed == []
    assert await pushes.store.watched() == [stale]


async def test_a_webhook_that_drips_its_answer_is_given_up_on_within_the_bound() -> None:
    # Its status line drips: a push reads the status only, never the body.
    registry = PushRegistry(store=PushStore(MemoryTokenStore()), timeout_seconds=0.5)
    loop = asyncio.get_running_loop()
    try:
        async with dripping(head=True) as url, httpx.AsyncClient() as http:
            started = loop.time()
            await registry._post(http, "acme", config(f"{url}/hook"), {"x": 1})
            took = loop.time() - started
    finally:
        await registry.aclose()
    assert took < 2.0  # 0.5 s and the scheduling around it; ~10 s without the bound


@pytest.fixture
def refusals() -> Iterator[InMemoryMetricReader]:
    """The activities' metrics (``psych.egress.refused`` among them), read locally."""
    reader = InMemoryMetricReader()
    instrument(tracer_provider=None, meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        yield reader
    finally:
        uninstrument()


def counted_refusals(reader: InMemoryMetricReader) -> list[tuple[dict[str, Any], Any]]:
    """Each data point of ``psych.egress.refused``: its attributes and its count."""
    data = reader.get_metrics_data()
    assert data is not None
    return [
        (dict(p.attributes or {}), getattr(p, "value", None))
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "psych.egress.refused"
        for p in m.data.data_points
    ]


async def test_a_name_resolving_to_a_refused_address_is_refused_at_registration_and_delivery(
    caplog: pytest.LogCaptureFixture, refusals: InMemoryMetricReader
) -> None:
    """A name the policy allows that resolves to the cloud metadata address is refused at
    registration (the A2A error names the host, the address and the rule); a
    configuration already kept under that name (registered when it resolved elsewhere, or
    by a process with other rules) is refused at delivery, by the address the connection
    would reach: nothing is sent there, while the task's other webhook gets the update.
    Both refusals are logged by the egress port naming what the request was for, and
    counted in ``psych.egress.refused`` by rule and purpose kind (``a2a_push``).
    Only loopback is ever connected to (the test's resolver answers the names)."""
    names = {"metadata.test": ["169.254.169.254"], "hooks.test": ["127.0.0.1"]}

    async def resolve(host: str, port: int) -> list[str]:
        return names[host]

    port = Egress(EgressSettings(rules=EgressRules.parse("127.0.0.1/32")), resolver=resolve)
    pushes = PushRegistry(store=PushStore(MemoryTokenStore()), egress=port)
    delivered = asyncio.Event()

    def once() -> AsyncIterator[Event]:
        async def follow() -> AsyncIterator[Event]:
            yield Task(id="task-1")
            await delivered.wait()

        return follow()

    with Upstream(lambda request: Answer(200, "{}")) as hook:
        good = f"http://hooks.test:{hook.url.rsplit(':', 1)[1]}/hook"
        try:
            with pytest.raises(
                InvalidParamsError,
                match=r"push notification url: egress refused: http://metadata\.test/hook "
                r"\(metadata\.test -> 169\.254\.169\.254\): link-local",
            ):
                await pushes.register(
                    SCOPE, "run-1", config("http://metadata.test/hook"), events=once
                )
            assert await pushes.list(SCOPE, "run-1") == []

            def kept_before(configs: dict[str, TaskPushNotificationConfig]) -> bool:
                configs["old"] = config("http://metadata.test/hook", "old")
                return True

            await pushes.store.change(SCOPE.tenant, "run-1", kept_before)
            await pushes.register(SCOPE, "run-1", config(good), events=once)

            async def pushed() -> None:
                while True:
                    if hook.requests and port.refusals:
                        return
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(pushed(), timeout=10)
            delivered.set()
        finally:
            await pushes.aclose()
    assert [r.path for r in hook.requests] == ["/hook"]
    assert port.connects == 1  # the loopback webhook only
    refused = ("metadata.test", "169.254.169.254", "link-local")
    assert [(r.host, r.address, r.kind) for r in port.refusals] == [refused, refused]
    assert "push notification to http://metadata.test/hook failed: egress refused" in caplog.text
    purpose = "an A2A push notification webhook of tenant 'acme'"
    logged = [r.getMessage() for r in caplog.records if r.name.endswith("egress._clients")]
    assert [line.split(" (")[0] for line in logged] == [
        f"{purpose}: egress refused: http://metadata.test/hook",  # at registration
        f"{purpose}: egress refused: metadata.test",  # at delivery
    ]
    assert counted_refusals(refusals) == [
        ({"psych.egress.rule": "link-local", "psych.egress.purpose": "a2a_push"}, 2)
    ]
