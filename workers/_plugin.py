"""The psych Temporal plugin: data converter, sandbox passthrough, failure types.

The plugin composes with the others on the same client or worker: it extends the data
converter and the sandboxed workflow runner it is handed (keeping a user's payload codec,
failure converter and other plugins' passthrough modules) instead of replacing them, as
Temporal's own contrib plugins do. So its place in a ``plugins=[...]`` list does not matter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, cast

from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    PayloadCodec,
    SerializationContext,
)
from temporalio.plugin import SimplePlugin
from temporalio.service import ConnectConfig, ServiceClient
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from psych_runtime.specs import PsychError, SpecError
from psych_runtime.workers.codec import chain_codecs
from psych_runtime.workflows import AttemptTimed

SANDBOX_PASSTHROUGH = (
    # Pure data models shared by workflow and activity code; re-importing them per Run
    # would cost time and give the converter and the workflow different classes.
    "psych_runtime.specs",
    "psych_runtime.activities.contract",  # payloads, context results, ids, slim forms
    "psych_runtime.workflows.contract",  # records, the contract's inputs, the carry
    # Client-side code the workflows package imports (PsychClient, the report): never run
    # by a workflow, yet re-executed with every Run's sandbox (pydantic classes built
    # again), 40 % of creating a Run's workflow instance when profiled.
    "psych_runtime.workflows.client",
    # Libraries those models are built on (deterministic, no I/O at import).
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "yaml",
)
"""Modules the workflow sandbox imports once instead of per Run (the only such list)."""


def _sandboxed_runner(runner: WorkflowRunner | None) -> WorkflowRunner:
    """The workflow runner a worker gets from the plugin, given the one it already has.

    A ``SandboxedWorkflowRunner`` keeps all its settings and passthrough modules and gains
    ``SANDBOX_PASSTHROUGH``; any other runner (``UnsandboxedWorkflowRunner``, a custom one)
    is kept as it is: it has no passthrough list to extend, and whoever chose it chose to
    leave the sandbox; with none, a sandbox with the default restrictions plus
    ``SANDBOX_PASSTHROUGH`` is created.
    """
    if runner is None:
        return SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
        )
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(
            runner, restrictions=runner.restrictions.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
        )
    return runner


def _data_converter(
    converter: DataConverter | None, codec: PayloadCodec | None = None
) -> DataConverter:
    """The data converter a client gets from the plugin, given the one it already has.

    Every psych payload is a pydantic model, so the payload converter must be pydantic's
    (or a subclass of it, which is kept). Temporal's default payload converter is swapped
    for ``PsychPayloadConverter`` (pydantic's, built once per process) while the rest of
    the converter (payload codec, failure converter, payload limits) is kept, so encryption
    or compression set up by the user or another plugin still applies.

    With ``codec`` (psych's encryption), it runs after a codec the converter already has
    (``chain_codecs``: compressing before encrypting), and Temporal's default failure
    converter becomes the one that moves failure messages and stack traces into an
    encoded payload: otherwise an error text quoting a tool result or a model's answer
    would sit in history in clear. A custom failure converter is kept as it is.

    Raises:
        SpecError: the converter has another non-default payload converter: psych
            payloads would not round-trip through it, and silently replacing it would
            break whoever installed it.
    """
    converter = _pydantic(converter)
    if codec is None:
        return converter
    failures = converter.failure_converter_class
    if failures is DefaultFailureConverter:
        failures = DefaultFailureConverterWithEncodedAttributes
    existing = converter.payload_codec
    return dataclasses.replace(
        converter,
        payload_codec=codec if existing is None else chain_codecs(existing, codec),
        failure_converter_class=failures,
    )


class PsychPayloadConverter(PydanticPayloadConverter):
    """pydantic's payload converter (the same encodings, the same JSON), whose converters
    are built once per process and shared by every instance.

    The SDK builds a data converter, and with it a payload converter, for every workflow
    activation (the command-aware one its payload visitor uses, whose payload converter
    the activation never calls); building pydantic's took ~85 us of the worker's event
    loop in a Run, four times a turn (bench/FIGURES.md, 2026-12-04 15:45). The shared
    converters hold no state but pydantic's type-adapter cache, so the process keeps one
    cache instead of one per instance. ``with_context`` still gets a new instance (the
    SDK's nullary construction) when a converter takes a serialization context.
    """

    _shared: ClassVar[Mapping[bytes, EncodingPayloadConverter] | None] = None

    def __init__(self) -> None:
        """Share the converters the process's first instance built."""
        shared = PsychPayloadConverter._shared
        if shared is None:
            super().__init__()
            PsychPayloadConverter._shared = self.converters
        else:
            self.converters = shared

    def with_context(self, context: SerializationContext) -> Self:
        """For an activity's payloads, ``ActivityPayloadConverter``: a result the workflow
        cannot read fails its workflow task, not the Run (see there)."""
        mine = type(self) is PsychPayloadConverter  # a subclass of a user's is theirs
        if mine and isinstance(context, ActivitySerializationContext):
            return cast(Self, _activity_converter())
        return super().with_context(context)


class ActivityPayloadConverter(PsychPayloadConverter):
    """``PsychPayloadConverter`` for an activity's payloads (``ActivitySerializationContext``).

    pydantic's ``ValidationError`` fails a workflow (``PsychPlugin``), so that a malformed
    Run input fails the Run rather than its task retrying forever. An activity's result
    that a workflow worker cannot read is another matter: during a rolling upgrade it is
    one a worker of a later build sent, with a field this build does not know (the
    contract forbids unknown fields; ``tests/workflows/histories/README.md``, compatibility
    notes). It must fail the workflow task, retried until a worker of the later build
    takes it, not the Run: the SDK fails the workflow on a failure type only, so the
    error is raised as a ``RuntimeError`` (the activity worker, decoding its input, turns
    any error into the activity's failure, as before).
    """

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        try:
            return super().from_payloads(payloads, type_hints)
        except ValidationError as err:
            raise RuntimeError(
                f"an activity's payload this worker cannot read (a worker of a later build "
                f"sent it?): {err}"
            ) from err

    def with_context(self, context: SerializationContext) -> Self:
        return self


_ACTIVITY_CONVERTER: list[ActivityPayloadConverter] = []


def _activity_converter() -> ActivityPayloadConverter:
    """The process's one ``ActivityPayloadConverter``: it holds no context, and the SDK asks
    for one for every activity payload (its input, its result), a few times a turn."""
    if not _ACTIVITY_CONVERTER:
        _ACTIVITY_CONVERTER.append(ActivityPayloadConverter())
    return _ACTIVITY_CONVERTER[0]


PSYCH_DATA_CONVERTER = DataConverter(payload_converter_class=PsychPayloadConverter)
"""The data converter of a client the plugin is given none: pydantic's payloads."""


def _pydantic(converter: DataConverter | None) -> DataConverter:
    if converter is None:
        return PSYCH_DATA_CONVERTER
    current = converter.payload_converter_class
    if issubclass(current, PydanticPayloadConverter):
        return converter
    if current is DefaultPayloadConverter:
        return dataclasses.replace(converter, payload_converter_class=PsychPayloadConverter)
    raise SpecError(
        f"PsychPlugin needs pydantic's payload converter, but the data converter uses "
        f"{current.__module__}.{current.__qualname__}; make it a subclass of "
        "temporalio.contrib.pydantic.PydanticPayloadConverter"
    )


class PsychPlugin(SimplePlugin):
    """Install on the Temporal client (it then applies to workers built from it).

    Installs pydantic's payload converter (``PsychPayloadConverter``: every payload is a
    pydantic model), adds the sandbox passthrough list above to the worker's sandboxed
    runner, and makes PsychError and pydantic's ValidationError fail the workflow rather
    than the workflow task (which Temporal would retry forever): a Run started with a
    malformed input (by hand, with the plain ``temporal`` CLI) fails at once, saying which
    field is wrong. A malformed signal is still only logged and dropped by the SDK, and a
    malformed update rejected. An activity's result the workflow cannot read fails only
    the workflow task (``ActivityPayloadConverter``: a later build's field, mid-upgrade).

    The service client it connects sends the reads psych times (a describe, a page of a
    history or a listing) one attempt at a time, retried as the SDK's core would
    (``AttemptTimed``): a timeout's status Temporal answers at once after transient
    failures is then told from its silence by the last attempt's time, not all of them.

    Each setting extends what the client or worker already has (a payload codec, a failure
    converter, another plugin's passthrough modules, an unsandboxed runner), so the plugin
    composes with others, such as tracing, in either order.

    Args:
        codec: psych's payload encryption (``PsychCodec``), or None for none. It joins
            the converter's own codec rather than replacing it (see ``_data_converter``).

    Raises:
        SpecError: at client creation, when the data converter has a payload converter
            that is neither Temporal's default nor pydantic's (or a subclass of it).
    """

    def __init__(self, codec: PayloadCodec | None = None) -> None:
        super().__init__(
            "psych_runtime.PsychPlugin",
            data_converter=lambda converter: _data_converter(converter, codec),
            workflow_runner=_sandboxed_runner,
            workflow_failure_exception_types=[PsychError, ValidationError],
        )

    async def connect_service_client(
        self,
        config: ConnectConfig,
        next: Callable[[ConnectConfig], Awaitable[ServiceClient]],
    ) -> ServiceClient:
        """The connected service client, its timed reads' attempts made one at a time
        (``AttemptTimed``), so a read's timeout's status is timed by its last attempt."""
        return AttemptTimed(await next(config))
