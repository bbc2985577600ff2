"""Fluent construction of Specs.

Every method records a grant and returns the builder, so a Spec reads as the sequence of
grants that built it. ``build()`` replays the recorded fields into a fresh Spec each time:
it is repeatable and every result is equal (and hashes the same) until the builder changes.
Code tools passed as functions are registered in the builder's ToolRegistry (its own, or
the one handed in, which is what a worker should load).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar

from pydantic import BaseModel, ValidationError

from psych_runtime.specs._errors import SpecError
from psych_runtime.specs._models import (
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
    Skill,
    SpawnEnvelope,
    SubagentRef,
    SuspensionPolicy,
    ToolStep,
    WorkflowSpec,
    WorkflowStepRef,
)
from psych_runtime.specs._registry import ToolDef, ToolRegistry
from psych_runtime.specs._version import format_validation_error

_M = TypeVar("_M", bound=BaseModel)
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def _make(cls: type[_M], where: str, /, **fields: Any) -> _M:
    try:
        return cls(**fields)
    except ValidationError as err:
        raise SpecError(f"{where}:\n{format_validation_error(err)}") from err


def _placeholder_schema(url: str) -> dict[str, Any]:
    names = list(dict.fromkeys(_PLACEHOLDER.findall(url)))
    if not names:
        # HttpTool's own default: the tool written in a file without input_schema is the
        # same tool, and must hash the same.
        return {}
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": names,
    }


def _names(value: Sequence[str], where: str, field: str) -> tuple[str, ...]:
    """``value`` as a tuple, refusing one string: ``tuple("get*")`` is its characters, and
    an ``allow`` of them would grant every name through its ``*`` (a ``Sequence[str]``
    annotation lets a string through the type checker)."""
    if isinstance(value, str):
        raise SpecError(
            f"{where}: {field} is a list of names, not the string {value!r}: write [{value!r}]"
        )
    return tuple(value)


def _check_registered(
    where: str, known: ToolDef, name: str | None, description: str | None, idempotent: bool | None
) -> None:
    """Refuse what ``tool()`` was given that the function's registration contradicts."""
    registered = {"name": known.name, "description": known.description}
    asked = {"name": name, "description": description}
    differ = [f"{k} {v!r}" for k, v in asked.items() if v is not None and v != registered[k]]
    if idempotent is not None and idempotent != known.idempotent:
        differ.append(f"idempotent={idempotent}")
    if differ:
        raise SpecError(
            f"{where}: the function is registered as tool {known.name!r}, "
            f"so {', '.join(differ)} cannot apply: its registration decides them"
        )


class _ToolsMixin:
    _registry: ToolRegistry
    _tools: dict[str, CodeTool | HttpTool]
    _mcp: dict[str, McpServer]
    _where: str

    def _put(self, into: dict[str, Any], name: str, value: Any) -> None:
        if name in into:
            raise SpecError(f"{self._where}: {name!r} is already granted; names are unique")
        into[name] = value

    def _grant(
        self, into: dict[str, Any], name: str, cls: type[BaseModel], where: str, /, **fields: Any
    ) -> None:
        self._put(into, name, _make(cls, where, **fields))

    @property
    def registry(self) -> ToolRegistry:
        """The ToolRegistry code tools were registered in; load it in the worker."""
        return self._registry

    def tool(
        self,
        fn: Callable[..., Any] | str,
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool | None = None,
        interruptible: bool = True,
    ) -> Self:
        """Grant a code tool: a function (registered here unless it already is) or a name.

        ``name``, ``description`` and ``idempotent`` (default False) are the registration's:
        for a function registered already they must agree with it, and a tool given by
        name takes none of them.

        Raises:
            SpecError: one of them is given where the registration decides otherwise.
        """
        if isinstance(fn, str):
            given = [k for k, v in (("name", name), ("description", description)) if v]
            given += ["idempotent"] if idempotent is not None else []
            if given:
                raise SpecError(
                    f"{self._where}: tool {fn!r} is granted by name, so {', '.join(given)} "
                    "cannot apply: they belong to its registration"
                )
            tool_name = fn
        else:
            known = self._registry.find(fn)
            if known is None:
                self._registry.register(
                    fn, name=name, description=description, idempotent=bool(idempotent)
                )
                tool_name = name or fn.__name__
            else:
                _check_registered(self._where, known, name, description, idempotent)
                tool_name = known.name
        self._grant(
            self._tools,
            tool_name,
            CodeTool,
            f"{self._where}: tool {tool_name!r}",
            name=tool_name,
            interruptible=interruptible,
        )
        return self

    def http_tool(
        self,
        name: str,
        *,
        description: str,
        url: str,
        method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST",
        input_schema: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        credential: str | None = None,
        timeout_seconds: float = 30.0,
        interruptible: bool = True,
    ) -> Self:
        """Grant an HTTP tool.

        Without ``input_schema`` the schema declares each ``{placeholder}`` of ``url`` as a
        required string, which is what the URL needs to be filled (a URL without one gets
        HttpTool's default, ``{}``).
        """
        schema = dict(input_schema) if input_schema is not None else _placeholder_schema(url)
        self._grant(
            self._tools,
            name,
            HttpTool,
            f"{self._where}: http_tool {name!r}",
            name=name,
            description=description,
            url=url,
            method=method,
            input_schema=schema,
            headers=dict(headers or {}),
            credential=credential,
            timeout_seconds=timeout_seconds,
            interruptible=interruptible,
        )
        return self

    def mcp_server(
        self,
        name: str,
        url: str,
        *,
        transport: Literal["http", "sse"] = "http",
        credential: str | None = None,
        oauth: McpOAuth | Mapping[str, Any] | None = None,
        allow: Sequence[str] = (),
        optional: bool = False,
        preload: bool | None = None,
    ) -> Self:
        """Grant an MCP server (tools discovered at run time, narrowed by ``allow``).

        Raises:
            SpecError: ``allow`` is one string rather than a list of names and prefixes.
        """
        self._grant(
            self._mcp,
            name,
            McpServer,
            f"{self._where}: mcp_server {name!r}",
            name=name,
            url=url,
            transport=transport,
            credential=credential,
            oauth=oauth,
            allow=_names(allow, f"{self._where}: mcp_server {name!r}", "allow"),
            optional=optional,
            preload=preload,
        )
        return self


class AgentBuilder(_ToolsMixin):
    """Fluent construction of an AgentSpec (see the module docstring)."""

    def __init__(self, name: str, *, registry: ToolRegistry | None = None) -> None:
        self._name = name
        self._where = f"agent {name!r}"
        self._registry = registry if registry is not None else ToolRegistry()
        self._fields: dict[str, Any] = {}
        self._tools = {}
        self._mcp = {}
        self._peers: dict[str, A2APeer] = {}
        self._skills: dict[str, Skill] = {}
        self._subagents: dict[str, tuple[str, AgentSpec | AgentBuilder]] = {}
        self._limits: dict[str, Any] = {}
        self._suspension: dict[str, Any] = {}

    def description(self, text: str) -> Self:
        """What this agent is for."""
        self._fields["description"] = text
        return self

    def instructions(self, text: str) -> Self:
        """The first block of the system prompt."""
        self._fields["instructions"] = text
        return self

    def model(
        self,
        model: str,
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        reasoning_effort: Literal["low", "medium", "high"] | None = None,
        fallbacks: Sequence[str] = (),
    ) -> Self:
        """Which model, and how it is called; ``fallbacks`` are tried in order on outage.

        Raises:
            SpecError: a bound is exceeded, or ``fallbacks`` is one string rather than a
                list of model ids.
        """
        self._fields["model"] = _make(
            ModelRef,
            f"{self._where}: model",
            model=model,
            temperature=temperature,
            top_p=top_p,
            max_output_tokens=max_output_tokens,
            reasoning_effort=reasoning_effort,
            fallbacks=_names(fallbacks, f"{self._where}: model", "fallbacks"),
        )
        return self

    def a2a_peer(self, name: str, url: str, **fields: Any) -> Self:
        """Grant an A2A peer (fields as on ``A2APeer``)."""
        self._grant(
            self._peers,
            name,
            A2APeer,
            f"{self._where}: a2a_peer {name!r}",
            name=name,
            url=url,
            **fields,
        )
        return self

    def skill(self, name: str, description: str, *, body: str) -> Self:
        """Add a skill: its description goes in the prompt, its body loads on demand."""
        self._grant(
            self._skills,
            name,
            Skill,
            f"{self._where}: skill {name!r}",
            name=name,
            description=description,
            body=body,
        )
        return self

    def subagent(self, name: str, description: str, spec: AgentSpec | AgentBuilder) -> Self:
        """Add a subagent the model may ``delegate`` to; a builder is built at ``build()``."""
        self._put(self._subagents, name, (description, spec))
        return self

    def spawn(self, **fields: Any) -> Self:
        """Allow composing children at run time (fields as on ``SpawnEnvelope``)."""
        self._fields["spawn"] = _make(SpawnEnvelope, f"{self._where}: spawn", **fields)
        return self

    def compaction(self, trigger_tokens: int, **fields: Any) -> Self:
        """Turn compaction on (fields as on ``CompactionPolicy``)."""
        self._fields["compaction"] = _make(
            CompactionPolicy,
            f"{self._where}: compaction",
            trigger_tokens=trigger_tokens,
            **fields,
        )
        return self

    def limits(self, **fields: Any) -> Self:
        """Set budgets; repeated calls accumulate (fields as on ``Limits``)."""
        merged = {**self._limits, **fields}
        _make(Limits, f"{self._where}: limits", **merged)
        self._limits = merged
        return self

    def suspension(self, **fields: Any) -> Self:
        """Set suspension expiries; repeated calls accumulate (fields as on SuspensionPolicy)."""
        merged = {**self._suspension, **fields}
        _make(SuspensionPolicy, f"{self._where}: suspension", **merged)
        self._suspension = merged
        return self

    def tasks(self, enabled: bool = True) -> Self:
        """Offer the task-list tool."""
        self._fields["tasks_enabled"] = enabled
        return self

    def components(self, enabled: bool = True) -> Self:
        """Let the model attach structured display components."""
        self._fields["components_enabled"] = enabled
        return self

    def answer_style(self, style: Literal["concise"] | None) -> Self:
        """Answer style block of the system prompt."""
        self._fields["answer_style"] = style
        return self

    def build(self) -> AgentSpec:
        """A fresh AgentSpec from everything recorded so far.

        Raises:
            SpecError: no model was given, or the fields do not make a valid Spec.
        """
        if "model" not in self._fields:
            raise SpecError(f"{self._where}: no model; call .model('<model id>') before build()")
        subagents = [
            _make(
                SubagentRef,
                f"{self._where}: subagent {name!r}",
                name=name,
                description=description,
                spec=spec.build() if isinstance(spec, AgentBuilder) else spec,
            )
            for name, (description, spec) in self._subagents.items()
        ]
        return _make(
            AgentSpec,
            self._where,
            name=self._name,
            **self._fields,
            tools=tuple(self._tools.values()),
            mcp_servers=tuple(self._mcp.values()),
            a2a_peers=tuple(self._peers.values()),
            skills=tuple(self._skills.values()),
            subagents=tuple(subagents),
            limits=Limits(**self._limits),
            suspension=SuspensionPolicy(**self._suspension),
        )


class WorkflowBuilder(_ToolsMixin):
    """Fluent construction of a WorkflowSpec (see the module docstring).

    Step names must be unique; the WorkflowSpec model enforces that at ``build()``.
    """

    def __init__(self, name: str, *, registry: ToolRegistry | None = None) -> None:
        self._name = name
        self._where = f"workflow {name!r}"
        self._registry = registry if registry is not None else ToolRegistry()
        self._description = ""
        self._tools = {}
        self._mcp = {}
        self._steps: list[tuple[str, str, Any]] = []
        self._limits: dict[str, Any] = {}
        self._suspension: dict[str, Any] = {}

    def description(self, text: str) -> Self:
        """What this workflow is for."""
        self._description = text
        return self

    def tool_step(self, name: str, tool: str, arguments: Mapping[str, Any] | None = None) -> Self:
        """Append a step that calls one of this workflow's tools with fixed arguments."""
        self._steps.append(("tool", name, (tool, dict(arguments or {}))))
        return self

    def agent_step(self, name: str, agent: AgentSpec | AgentBuilder) -> Self:
        """Append a step that runs an agent; a builder is built at ``build()``."""
        self._steps.append(("agent", name, agent))
        return self

    def workflow_step(self, name: str, workflow: WorkflowSpec | WorkflowBuilder) -> Self:
        """Append a step that runs a nested workflow; a builder is built at ``build()``."""
        self._steps.append(("workflow", name, workflow))
        return self

    def limits(self, **fields: Any) -> Self:
        """Set budgets; repeated calls accumulate (fields as on ``Limits``)."""
        merged = {**self._limits, **fields}
        _make(Limits, f"{self._where}: limits", **merged)
        self._limits = merged
        return self

    def suspension(self, **fields: Any) -> Self:
        """Set suspension expiries; repeated calls accumulate (fields as on SuspensionPolicy)."""
        merged = {**self._suspension, **fields}
        _make(SuspensionPolicy, f"{self._where}: suspension", **merged)
        self._suspension = merged
        return self

    def build(self) -> WorkflowSpec:
        """A fresh WorkflowSpec from everything recorded so far.

        Raises:
            SpecError: the fields do not make a valid Spec (no steps, repeated step names...).
        """
        steps: list[AgentStep | ToolStep | WorkflowStepRef] = []
        for kind, name, payload in self._steps:
            if kind == "tool":
                tool, arguments = payload
                steps.append(
                    _make(
                        ToolStep,
                        f"{self._where}: step {name!r}",
                        name=name,
                        tool=tool,
                        arguments=arguments,
                    )
                )
            elif kind == "agent":
                spec = payload.build() if isinstance(payload, AgentBuilder) else payload
                steps.append(
                    _make(AgentStep, f"{self._where}: step {name!r}", name=name, spec=spec)
                )
            else:
                spec = payload.build() if isinstance(payload, WorkflowBuilder) else payload
                steps.append(
                    _make(WorkflowStepRef, f"{self._where}: step {name!r}", name=name, spec=spec)
                )
        return _make(
            WorkflowSpec,
            self._where,
            name=self._name,
            description=self._description,
            steps=tuple(steps),
            tools=tuple(self._tools.values()),
            mcp_servers=tuple(self._mcp.values()),
            limits=Limits(**self._limits),
            suspension=SuspensionPolicy(**self._suspension),
        )
