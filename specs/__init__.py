"""psych_runtime.specs: Specs as pure data.

The Spec models, Version hashing and documents, publish-time validation, access narrowing,
the builders, the ToolRegistry and prompt assembly. Nothing here does I/O or imports
temporalio, so all of it is safe inside a workflow.
"""

from typing import TYPE_CHECKING, Any

from psych_runtime.specs._allow import matches
from psych_runtime.specs._builders import AgentBuilder, WorkflowBuilder
from psych_runtime.specs._context_free import context_free_problems
from psych_runtime.specs._depth import DepthCap, depth_refusal
from psych_runtime.specs._documents import (
    MAX_DOCUMENT_BYTES,
    MAX_INT_DIGITS,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_VALUES,
    load_yaml,
)
from psych_runtime.specs._errors import (
    AccessDenied,
    BadCursor,
    BlobsUnavailable,
    NotFound,
    NotPermitted,
    PsychError,
    Refused,
    RegistryError,
    RunFailed,
    SpecError,
    StoreDamaged,
    ValidationFailed,
    VersionMismatch,
)
from psych_runtime.specs._field_docs import field_docs
from psych_runtime.specs._flags import env_flag
from psych_runtime.specs._mcp_tool_names import MCP_TOOL_SEPARATOR, sanitise_tool_name
from psych_runtime.specs._models import (
    NAME_PATTERN,
    A2APeer,
    AgentSpec,
    AgentStep,
    CodeTool,
    CompactionPolicy,
    HttpTool,
    Limits,
    McpOAuth,
    McpServer,
    ModelRef,
    Scope,
    Skill,
    SpawnEnvelope,
    Spec,
    SubagentRef,
    SuspensionPolicy,
    ToolStep,
    WorkflowSpec,
    WorkflowStepRef,
)
from psych_runtime.specs._nested import nested_specs
from psych_runtime.specs._permits import (
    PERMITS_ANSWER_SECONDS,
    AllPermits,
    PermitKind,
    Permits,
    PermitSource,
    StaticPermits,
    TenantPermits,
    permit_problems,
    permitted_by,
    port_failure,
)
from psych_runtime.specs._problem import Problem
from psych_runtime.specs._prompt import TaskItem, system_prompt, with_context
from psych_runtime.specs._registry import (
    ExternalWait,
    ToolDef,
    ToolRegistry,
    tool_call_scope,
    tool_scope,
)
from psych_runtime.specs._schema import SCHEMA_FILE, spec_json_schema, spec_json_schema_text
from psych_runtime.specs._subagents import LeftOut, narrow_subagent, subagent_depth_refusal
from psych_runtime.specs._unsupported import (
    UNSUPPORTED_FIELDS,
    UNSUPPORTED_VALUES,
    unsupported_features,
)
from psych_runtime.specs._url_template import host_placeholders
from psych_runtime.specs._validation import (
    BUILTIN_TOOL_NAMES,
    ValidationContext,
    mcp_connection_key,
    mcp_servers_of,
    narrow,
    validate,
)
from psych_runtime.specs._version import (
    Version,
    VersionStore,
    canonical_bytes,
    parse_spec,
    spec_from_json,
    spec_from_yaml,
    spec_to_data,
    spec_to_json,
    spec_to_yaml,
    version_hash,
)
from psych_runtime.specs._wire import (
    drop_defaults,
    field_defaults,
    spec_wire_data,
    version_wire_data,
)

if TYPE_CHECKING:
    from psych_runtime.specs._display import (
        COMPONENT_KINDS,
        COMPONENT_SCHEMA,
        MAX_ITEMS,
        MAX_LINK,
        MAX_SERIES,
        MAX_SHORT,
        MAX_TASK_TITLE,
        MAX_TASKS,
        MAX_TEXT,
        TASKS_SCHEMA,
        AnyComponent,
        Card,
        CardItem,
        Carousel,
        Chart,
        Component,
        Detail,
        DetailField,
        Metric,
        Series,
        Task,
        Timeline,
        TimelineEvent,
        parse_component,
        parse_tasks,
    )

_DISPLAY = frozenset(
    [
        "COMPONENT_KINDS",
        "COMPONENT_SCHEMA",
        "MAX_ITEMS",
        "MAX_LINK",
        "MAX_SERIES",
        "MAX_SHORT",
        "MAX_TASK_TITLE",
        "MAX_TASKS",
        "MAX_TEXT",
        "TASKS_SCHEMA",
        "AnyComponent",
        "Card",
        "CardItem",
        "Carousel",
        "Chart",
        "Component",
        "Detail",
        "DetailField",
        "Metric",
        "Series",
        "Task",
        "Timeline",
        "TimelineEvent",
        "parse_component",
        "parse_tasks",
    ]
)
"""The display components' names, loaded on first use: building those models and their
JSON Schemas is a good part of this package's import, and ``psych validate`` needs none."""


def __getattr__(name: str) -> Any:
    if name in _DISPLAY:
        from psych_runtime.specs import _display

        return getattr(_display, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "A2APeer",
    "AccessDenied",
    "AgentBuilder",
    "AgentSpec",
    "AgentStep",
    "AllPermits",
    "AnyComponent",
    "BUILTIN_TOOL_NAMES",
    "BadCursor",
    "BlobsUnavailable",
    "COMPONENT_KINDS",
    "COMPONENT_SCHEMA",
    "Card",
    "CardItem",
    "Carousel",
    "Chart",
    "CodeTool",
    "CompactionPolicy",
    "Component",
    "DepthCap",
    "Detail",
    "DetailField",
    "ExternalWait",
    "HttpTool",
    "LeftOut",
    "Limits",
    "MAX_DOCUMENT_BYTES",
    "MAX_INT_DIGITS",
    "MAX_ITEMS",
    "MAX_LINK",
    "MAX_SERIES",
    "MAX_SHORT",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_TASKS",
    "MAX_TASK_TITLE",
    "MAX_TEXT",
    "MAX_VALUES",
    "MCP_TOOL_SEPARATOR",
    "McpOAuth",
    "McpServer",
    "Metric",
    "ModelRef",
    "NAME_PATTERN",
    "NotFound",
    "NotPermitted",
    "PERMITS_ANSWER_SECONDS",
    "PermitKind",
    "PermitSource",
    "Permits",
    "Problem",
    "PsychError",
    "Refused",
    "RegistryError",
    "RunFailed",
    "SCHEMA_FILE",
    "Scope",
    "Series",
    "Skill",
    "SpawnEnvelope",
    "Spec",
    "SpecError",
    "StaticPermits",
    "StoreDamaged",
    "SubagentRef",
    "SuspensionPolicy",
    "TASKS_SCHEMA",
    "Task",
    "TaskItem",
    "TenantPermits",
    "Timeline",
    "TimelineEvent",
    "ToolDef",
    "ToolRegistry",
    "ToolStep",
    "UNSUPPORTED_FIELDS",
    "UNSUPPORTED_VALUES",
    "ValidationContext",
    "ValidationFailed",
    "Version",
    "VersionMismatch",
    "VersionStore",
    "WorkflowBuilder",
    "WorkflowSpec",
    "WorkflowStepRef",
    "canonical_bytes",
    "context_free_problems",
    "depth_refusal",
    "drop_defaults",
    "env_flag",
    "field_defaults",
    "field_docs",
    "host_placeholders",
    "load_yaml",
    "matches",
    "mcp_connection_key",
    "mcp_servers_of",
    "narrow",
    "narrow_subagent",
    "nested_specs",
    "parse_component",
    "parse_spec",
    "parse_tasks",
    "permit_problems",
    "permitted_by",
    "port_failure",
    "sanitise_tool_name",
    "spec_from_json",
    "spec_from_yaml",
    "spec_json_schema",
    "spec_json_schema_text",
    "spec_to_data",
    "spec_to_json",
    "spec_to_yaml",
    "spec_wire_data",
    "subagent_depth_refusal",
    "system_prompt",
    "tool_call_scope",
    "tool_scope",
    "unsupported_features",
    "validate",
    "version_hash",
    "version_wire_data",
    "with_context",
]
