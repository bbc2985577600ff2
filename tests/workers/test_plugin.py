"""PsychPlugin extends the converter and workflow runner it is given instead of replacing them.

Clients and workers here are real (on the session dev server) but never poll: the tests
read the configuration the SDK ends up with after every plugin ran. Runs through composed
plugins are in ``tests/e2e/test_plugin_composition.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    JSONPlainPayloadConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import SandboxImportNotificationPolicy

from psych_runtime.activities import LocalBlobStore
from psych_runtime.activities.contract import ChatMessage
from psych_runtime.activities.egress import Egress
from psych_runtime.specs import SpecError
from psych_runtime.workers import SANDBOX_PASSTHROUGH, PsychPlugin, WorkerSettings, build_worker
from psych_runtime.workers._plugin import PsychPayloadConverter
from psych_runtime.workflows import AgentRun


class NoopCodec(PayloadCodec):
    async def encode(self, payloads: Any) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Any) -> list[Payload]:
        return list(payloads)


class QuietFailureConverter(DefaultFailureConverter):
    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)


class StrictPydanticConverter(PydanticPayloadConverter):
    """A user's own subclass of pydantic's converter: compatible, so it stays."""


class JsonOnlyConverter(CompositePayloadConverter):
    """A payload converter that is neither the default nor pydantic's."""

    def __init__(self) -> None:
        super().__init__(JSONPlainPayloadConverter())


def psych_client(dev_env: WorkflowEnvironment, converter: DataConverter | None = None) -> Client:
    base = dev_env.client
    options: dict[str, Any] = {} if converter is None else {"data_converter": converter}
    return Client(base.service_client, namespace=base.namespace, plugins=[PsychPlugin()], **options)


def test_codec_and_failure_converter_are_kept(dev_env: WorkflowEnvironment) -> None:
    codec = NoopCodec()
    given = DataConverter(payload_codec=codec, failure_converter_class=QuietFailureConverter)

    converter = psych_client(dev_env, given).data_converter

    assert converter.payload_converter_class is PsychPayloadConverter
    assert converter.payload_codec is codec
    assert converter.failure_converter_class is QuietFailureConverter


def test_default_converter_becomes_pydantic(dev_env: WorkflowEnvironment) -> None:
    converter = psych_client(dev_env).data_converter
    assert converter.payload_converter_class is PsychPayloadConverter
    assert issubclass(PsychPayloadConverter, PydanticPayloadConverter)
    assert converter.payload_codec is None


def test_pydantic_converter_given_is_kept(dev_env: WorkflowEnvironment) -> None:
    given = DataConverter(payload_converter_class=PydanticPayloadConverter)
    assert psych_client(dev_env, given).data_converter is given


def test_psych_payload_converter_is_built_once_and_writes_what_pydantics_writes() -> None:
    # The SDK builds a payload converter for every workflow activation: the instances
    # share the first one's converters instead of building their own.
    first, second = PsychPayloadConverter(), PsychPayloadConverter()
    assert first.converters is second.converters
    pydantics = PydanticPayloadConverter()
    message = ChatMessage(role="user", content="hello")
    for sample in ("psych", {"a": [1, 2.5, None]}, b"raw", message):
        (mine,) = first.to_payloads([sample])
        (theirs,) = pydantics.to_payloads([sample])
        assert mine == theirs
        assert first.from_payloads([mine], [type(sample)]) == [sample]


class ContextualJson(JSONPlainPayloadConverter, WithSerializationContext):
    """A JSON converter that takes a serialization context (a user's, say)."""

    def __init__(self, context: SerializationContext | None = None) -> None:
        super().__init__()
        self.context = context

    def with_context(self, context: SerializationContext) -> ContextualJson:
        return ContextualJson(context)


def test_psych_payload_converter_takes_a_context_without_changing_the_shared_ones() -> None:
    # The SDK's ``with_context`` builds a new instance through the nullary constructor
    # (so with the shared converters) and then sets that instance's own converters.
    converter = PsychPayloadConverter()
    shared = dict(converter.converters)
    converter._set_converters(*shared.values(), ContextualJson())
    context = WorkflowSerializationContext(namespace="default", workflow_id="run-1")

    bound = converter.with_context(context)

    assert type(bound) is PsychPayloadConverter and bound is not converter
    contextual = bound.converters[ContextualJson().encoding.encode()]
    assert isinstance(contextual, ContextualJson) and contextual.context == context
    assert dict(PsychPayloadConverter().converters) == shared


def test_pydantic_subclass_is_kept(dev_env: WorkflowEnvironment) -> None:
    given = DataConverter(payload_converter_class=StrictPydanticConverter)
    assert psych_client(dev_env, given).data_converter is given


def test_conflicting_payload_converter_is_refused_by_name(dev_env: WorkflowEnvironment) -> None:
    given = DataConverter(payload_converter_class=JsonOnlyConverter)
    with pytest.raises(
        SpecError, match=r"test_plugin\.JsonOnlyConverter.*PydanticPayloadConverter"
    ):
        psych_client(dev_env, given)
    assert given.payload_converter_class is JsonOnlyConverter  # left as it was


@pytest.fixture
async def egress() -> AsyncIterator[Egress]:
    port = Egress()
    try:
        yield port
    finally:
        await port.aclose()


async def runner_of(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    egress: Egress,
    given: WorkflowRunner | None,
    *,
    sandbox: bool = False,
    **options: Any,
) -> WorkflowRunner:
    """The runner a psych worker built with ``given`` (None: no runner option) ends up with."""
    task_queue = f"plugin-{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(
        task_queue=task_queue, blobs=LocalBlobStore(tmp_path), workflow_sandbox=sandbox
    )
    if given is not None:
        options["workflow_runner"] = given
    built = build_worker(psych_client(dev_env), settings, egress=egress, **options)
    # Started and stopped, so no half-made worker outlives the test.
    async with built:
        return built.config(active_config=True)["workflow_runner"]


async def test_psych_workflows_leave_the_sandbox_unless_asked(
    dev_env: WorkflowEnvironment, tmp_path: Path, egress: Egress
) -> None:
    # Default: psych's own workflows run unsandboxed (docs/decisions/workers.md, "The
    # workflow sandbox").
    assert isinstance(await runner_of(dev_env, tmp_path, egress, None), UnsandboxedWorkflowRunner)
    # workflow_sandbox (PSYCH_WORKFLOW_SANDBOX=1) puts them back in it, with our passthrough.
    asked = await runner_of(dev_env, tmp_path, egress, None, sandbox=True)
    assert isinstance(asked, SandboxedWorkflowRunner)
    assert set(SANDBOX_PASSTHROUGH) <= asked.restrictions.passthrough_modules
    assert WorkerSettings.from_env({"PSYCH_WORKFLOW_SANDBOX": "1"}).workflow_sandbox
    assert not WorkerSettings.from_env({}).workflow_sandbox
    # Someone else's workflow classes keep Temporal's default sandbox.
    theirs = await runner_of(dev_env, tmp_path, egress, None, workflows=[AgentRun])
    assert isinstance(theirs, SandboxedWorkflowRunner)


async def test_unsandboxed_runner_is_kept(
    dev_env: WorkflowEnvironment, tmp_path: Path, egress: Egress
) -> None:
    given = UnsandboxedWorkflowRunner()
    assert await runner_of(dev_env, tmp_path, egress, given) is given


async def test_users_sandbox_keeps_its_settings_and_gains_ours(
    dev_env: WorkflowEnvironment, tmp_path: Path, egress: Egress
) -> None:
    restrictions = SandboxRestrictions.default.with_passthrough_modules(
        "tests.e2e._http_server"
    ).with_import_notification_policy(SandboxImportNotificationPolicy.SILENT)
    given = SandboxedWorkflowRunner(restrictions=restrictions)

    runner = await runner_of(dev_env, tmp_path, egress, given)

    assert isinstance(runner, SandboxedWorkflowRunner)
    got = runner.restrictions
    assert got.passthrough_modules == restrictions.passthrough_modules | set(SANDBOX_PASSTHROUGH)
    assert got.import_notification_policy is SandboxImportNotificationPolicy.SILENT
    assert got.invalid_module_members is restrictions.invalid_module_members
    assert runner.runner_class is given.runner_class


async def test_default_sandbox_gains_ours(
    dev_env: WorkflowEnvironment, tmp_path: Path, egress: Egress
) -> None:
    runner = await runner_of(dev_env, tmp_path, egress, SandboxedWorkflowRunner())
    assert isinstance(runner, SandboxedWorkflowRunner)
    default = SandboxRestrictions.default.passthrough_modules
    assert runner.restrictions.passthrough_modules == default | set(SANDBOX_PASSTHROUGH)
