"""``PsychClient.dispatch`` of a Version it did not publish: one that publishing would refuse
for a reason that needs no worker does not start; a valid one starts, checked once.

Every problem is compared, path and message: a Version refused for another reason (its
unregistered code tool among them, which only a worker can judge), or a problem missing,
fails the test.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import FileVersionStore
from psych_runtime.specs import (
    AgentSpec,
    CodeTool,
    CompactionPolicy,
    HttpTool,
    Limits,
    ModelRef,
    Problem,
    Scope,
    SpawnEnvelope,
    ValidationFailed,
    Version,
    context_free_problems,
)
from psych_runtime.workflows import PsychClient
from psych_runtime.workflows.client import _checked

SCOPE = Scope(tenant="acme", principal="ops")
LITERAL = (
    "literal credential header: name a credential instead (`credential`), which the "
    "SecretResolver resolves at call time; a literal is stored in the Version, in history "
    "and in records"
)


def leaky() -> AgentSpec:
    """A literal API key in a header and a spawn depth over the delegation depth; its code
    tool is registered nowhere."""
    return AgentSpec(
        name="leaky",
        model=ModelRef(model="m"),
        tools=[
            CodeTool(name="lookup"),
            HttpTool(
                name="orders",
                description="Orders.",
                url="https://orders.test/",
                headers={"X-Api-Key": "s3cret"},
            ),
        ],
        spawn=SpawnEnvelope(max_depth=5),
        limits=Limits(max_delegation_depth=2),
    )


EXPECTED = [
    ("tools[orders].headers[X-Api-Key]", LITERAL),
    ("spawn.max_depth", "5 exceeds limits.max_delegation_depth (2)"),
]


@pytest.fixture
def client(dev_env: WorkflowEnvironment, tmp_path: Path) -> PsychClient:
    # No registry, no worker: the Runs a dispatch starts wait on a queue nobody polls.
    return PsychClient(
        dev_env.client, store=FileVersionStore(tmp_path), task_queue=f"q-{uuid.uuid4().hex}"
    )


async def refused(client: PsychClient, spec: Version | str) -> list[tuple[str, str]]:
    """What dispatching ``spec`` was refused for (fails if it was not)."""
    with pytest.raises(ValidationFailed) as failed:
        await client.dispatch(spec, "hi", scope=SCOPE)
    return [(p.path, p.message) for p in failed.value.problems]


async def started_on(client: PsychClient, expected: int) -> list[str]:
    """The workflow ids of the Runs started on the client's queue, once ``expected`` are
    visible (visibility lags the start)."""
    query = f"TaskQueue = '{client.task_queue}'"
    async with asyncio.timeout(30):
        while True:
            ids = [run.id async for run in client.temporal.list_workflows(query)]
            if len(ids) >= expected:
                return ids
            await asyncio.sleep(0.2)


async def test_a_version_publishing_would_refuse_does_not_start(client: PsychClient) -> None:
    version = Version.of(leaky())
    # Built by hand, read back from its document, or written to the store without the
    # client's publish (whose validation would refuse it): each is refused alike.
    assert await refused(client, version) == EXPECTED
    assert await refused(client, Version.from_json(version.to_json())) == EXPECTED
    assert await refused(client, Version.from_yaml(version.to_yaml())) == EXPECTED
    assert await refused(client, client.store.publish(leaky()).hash) == EXPECTED
    # Refused every time: only a Version that passed is remembered.
    assert await refused(client, version) == EXPECTED
    # Its code tool unregistered (a worker's to judge), the Spec without the two problems
    # starts; and it is the one Run on the queue.
    fixed = leaky().model_copy(
        update={"tools": leaky().tools[:1], "spawn": SpawnEnvelope(max_depth=2)}
    )
    run = await client.dispatch(Version.of(fixed), "hi", scope=SCOPE)
    try:
        assert await started_on(client, 1) == [run.workflow_id]
    finally:
        await client.temporal.get_workflow_handle(run.workflow_id).terminate("test done")


async def test_a_version_with_a_blank_compaction_model_does_not_start(
    client: PsychClient,
) -> None:
    # None is the agent's model; a blank id is no model, and a Run used to start with it
    # taken as None (the summariser silently on the agent's model).
    spec = AgentSpec(
        name="blank",
        model=ModelRef(model="m"),
        compaction=CompactionPolicy(trigger_tokens=100, model=""),
    )
    assert await refused(client, Version.of(spec)) == [
        ("compaction.model", "'' names no model: give a model id, or leave it out")
    ]


def test_a_version_is_checked_once_per_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[str] = []

    def counted(spec: AgentSpec) -> list[Problem]:
        checks.append(spec.name)
        return context_free_problems(spec)

    monkeypatch.setattr(_checked, "context_free_problems", counted)
    checked = _checked.CheckedVersions(limit=2)
    a, b, c = (Version.of(AgentSpec(name=n, model=ModelRef(model="m"))) for n in "abc")
    for version in (a, a, b, a, b):
        assert checked.check(version) is version
    assert checks == ["a", "b"]
    # A third hash forgets the oldest, which is checked again when it comes back.
    checked.check(c)
    checked.check(a)
    assert checks == ["a", "b", "c", "a"]
    # A published Spec's hash passed publishing's validation: not checked again.
    checked.passed(Version.of(leaky()).hash)
    checked.check(Version.of(leaky()))
    assert checks == ["a", "b", "c", "a"]
