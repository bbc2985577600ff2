"""The psych Temporal plugin: data converter, sandbox passthrough, failure types.

The plugin composes with the others on the same client or worker: it extends the data
converter and the sandboxed workflow runner it is handed (keeping a user's payload codec,
failure converter and other plugins' passthrough modules) instead of replacing them, as
Temporal's own contrib plugins do. So its place in a ``plugins=[...]`` list does not matter.
"""

from __future__ import annotations

import dataclasses

from pydantic import ValidationError
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, DefaultPayloadConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from psych_runtime.specs import PsychError, SpecError

SANDBOX_PASSTHROUGH = (
    # Pure data models shared by workflow and activity code; re-importing them per Run
    # would cost time and give the converter and the workflow different classes.
    "psych_runtime.specs",
    "psych_runtime.activities._payloads",
    "psych_runtime.workflows._records",
    "psych_runtime.workflows._contract",
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


def _data_converter(converter: DataConverter | None) -> DataConverter:
    """The data converter a client gets from the plugin, given the one it already has.

    Every psych payload is a pydantic model, so the payload converter must be pydantic's
    (or a subclass of it, which is kept). Temporal's default payload converter is swapped
    for pydantic's while the rest of the converter (payload codec, failure converter,
    payload limits) is kept, so encryption or compression set up by the user or another
    plugin still applies.

    Raises:
        SpecError: the converter has another non-default payload converter: psych
            payloads would not round-trip through it, and silently replacing it would
            break whoever installed it.
    """
    if converter is None:
        return pydantic_data_converter
    current = converter.payload_converter_class
    if issubclass(current, PydanticPayloadConverter):
        return converter
    if current is DefaultPayloadConverter:
        return dataclasses.replace(converter, payload_converter_class=PydanticPayloadConverter)
    raise SpecError(
        f"PsychPlugin needs pydantic's payload converter, but the data converter uses "
        f"{current.__module__}.{current.__qualname__}; make it a subclass of "
        "temporalio.contrib.pydantic.PydanticPayloadConverter"
    )


class PsychPlugin(SimplePlugin):
    """Install on the Temporal client (it then applies to workers built from it).

    Installs pydantic's payload converter (every payload is a pydantic model), adds the
    sandbox passthrough list above to the worker's sandboxed runner, and makes PsychError
    and pydantic's ValidationError fail the workflow rather than the workflow task (which
    Temporal would retry forever): a Run started with a malformed input (by hand, with the
    plain ``temporal`` CLI) fails at once, saying which field is wrong. A malformed signal
    is still only logged and dropped by the SDK, and a malformed update rejected.

    Each setting extends what the client or worker already has (a payload codec, a failure
    converter, another plugin's passthrough modules, an unsandboxed runner), so the plugin
    composes with others, such as tracing, in either order.

    Raises:
        SpecError: at client creation, when the data converter has a payload converter
            that is neither Temporal's default nor pydantic's (or a subclass of it).
    """

    def __init__(self) -> None:
        super().__init__(
            "psych_runtime.PsychPlugin",
            data_converter=_data_converter,
            workflow_runner=_sandboxed_runner,
            workflow_failure_exception_types=[PsychError, ValidationError],
        )
