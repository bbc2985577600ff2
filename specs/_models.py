"""The Spec models: what an agent or a workflow is, as frozen data.

Field names, types, defaults and bounds are the seed API's (``shared/seeds/002_*.txt``);
the attribute docstrings below double as the field reference.

Collections come in two kinds. Set-like ones (tools, skills, MCP servers, A2A peers,
subagents, and the plain-string sets ``allow``, ``extensions``, ``SpawnEnvelope.tools`` and
``SpawnEnvelope.models``) are sorted at validation and refuse a repeated entry, so their
order never moves a Version hash. Ordered ones (workflow steps, model fallbacks, OAuth
redirect URIs) keep the order they were given, because order is meaning there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from psych_runtime.specs._errors import SpecError
from psych_runtime.specs._values import NUMBER, own_json

NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_.-]{0,127}$"

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
"""An identifier: a letter or underscore, then up to 127 of ``[a-zA-Z0-9_.-]``."""

FORBIDDEN_HTTP_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
"""Headers an HttpTool may not carry literally: credentials are names, resolved at call time."""


class _Frozen(BaseModel):
    model_config = ConfigDict(
        # No use_attribute_docstrings: the field docstrings are read only when the schema or
        # the reference asks (``_field_docs``), not at every import.
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
    )


def _sorted_unique_names(items: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    seen: set[str] = set()
    for item in items:
        if item.name in seen:
            raise ValueError(f"{what} name {item.name!r} appears more than once")
        seen.add(item.name)
    return tuple(sorted(items, key=lambda item: item.name))


def _sorted_unique_strings(items: tuple[str, ...], what: str) -> tuple[str, ...]:
    if len(set(items)) != len(items):
        repeated = sorted({s for s in items if items.count(s) > 1})
        raise ValueError(f"{what} repeats {', '.join(map(repr, repeated))}")
    return tuple(sorted(items))


class ModelRef(_Frozen):
    """Which model, and how it is called.

    ``fallbacks`` is failover for a provider outage, not routing: the list is tried in order
    on transient failure and is never chosen between on cost or capability."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """The model id, as the worker's model endpoint configuration knows it."""
    temperature: Annotated[float | None, Field(ge=0, le=2), NUMBER] = None
    """Sampling temperature; ``None`` leaves the provider's default."""
    top_p: Annotated[float | None, Field(gt=0, le=1), NUMBER] = None
    """Nucleus sampling mass; ``None`` leaves the provider's default."""
    max_output_tokens: Annotated[int | None, Field(gt=0), NUMBER] = None
    """Cap on tokens generated per call; ``None`` leaves the provider's default."""
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    """Reasoning effort for models that support it."""
    fallbacks: tuple[Annotated[str, Field(min_length=1, max_length=256)], ...] = ()
    """Model ids tried in order when the primary fails transiently. Ordered."""


class Limits(_Frozen):
    """Budgets. Every one has a default because an unset limit is an unbounded bill."""

    max_steps: Annotated[int, Field(gt=0, le=10000), NUMBER] = 48
    """Most model calls (every attempt, retries included) plus tool calls a Run may make."""
    max_turns: Annotated[int, Field(gt=0, le=1000), NUMBER] = 32
    """Most turns (one model call and the tool calls it produced) a Run may take."""
    max_tool_calls_per_turn: Annotated[int, Field(gt=0, le=256), NUMBER] = 16
    """Calls beyond this in one turn are not run; each gets an error result."""
    deadline_seconds: Annotated[float, Field(gt=0, le=86400), NUMBER] = 900.0
    """Seconds of work from admission: time the Run only waits (for an approval, an answer,
    an external completion) does not count, the clock runs while any call executes. Then a
    grace period for the calls in flight, then FORCE_SETTLED (open calls UNKNOWN)."""
    transient_retry_budget: Annotated[int, Field(ge=0, le=100), NUMBER] = 8
    """Transient failures (5xx, 429, 408, connection, stream idle) retried per Run."""
    max_delegation_depth: Annotated[int, Field(ge=0, le=16), NUMBER] = 3
    """Deepest delegation depth a subagent on this agent's chain may run at: depth is
    absolute (the root Run 0, a child its parent's + 1) and every agent on the chain,
    the child itself included, bounds it (``depth_refusal``)."""
    max_fanout_per_turn: Annotated[int, Field(gt=0, le=64), NUMBER] = 4
    """Most children (``delegate`` and ``spawn`` together) one turn may start."""
    failure_streak_threshold: Annotated[int, Field(gt=0, le=100), NUMBER] = 3
    """Consecutive failures of one tool after which it is withheld and the model told."""
    failure_streak_hard_stop: Annotated[int, Field(gt=0, le=200), NUMBER] = 6
    """Consecutive failures of one tool after which the Run fails."""
    repeat_call_threshold: Annotated[int, Field(gt=0, le=100), NUMBER] = 3
    """Identical call with identical result this many times gets a refusal."""
    repeat_call_hard_stop: Annotated[int, Field(gt=0, le=200), NUMBER] = 6
    """Identical call with identical result this many times stops the Run."""
    stream_idle_seconds: Annotated[float, Field(ge=0, le=3600), NUMBER] = 300.0
    """Longest gap between a model's response bytes (stream chunks, or the wait for a whole
    answer when the endpoint does not stream) before the call fails transiently; 0 disables."""
    large_result_bytes: Annotated[int, Field(gt=0), NUMBER] = 32768
    """Tool results larger than this are stored whole and shown as handle + preview."""
    max_history_records: Annotated[int, Field(ge=0, le=20000), NUMBER] = 300
    """How many messages of an earlier Run's conversation a Run continuing it (a thread:
    ``dispatch(thread=...)``, ``next_run``) shows its model, the latest ones; 0: none."""


class SuspensionPolicy(_Frozen):
    """How long a suspended Run waits before it is given up on (settled ABANDONED)."""

    approval_expires_seconds: Annotated[float, Field(gt=0), NUMBER] = 86400.0
    """Wait for an approval decision."""
    question_expires_seconds: Annotated[float, Field(gt=0), NUMBER] = 86400.0
    """Wait for an answer to ``ask_question``."""
    external_expires_seconds: Annotated[float, Field(gt=0), NUMBER] = 604800.0
    """Wait for an external completion (webhook, callback)."""
    children_expires_seconds: Annotated[float, Field(gt=0), NUMBER] = 3600.0
    """Wait for child Runs."""
    may_ask_questions: bool = False
    """Whether the built-in ``ask_question`` tool is offered."""


class CompactionPolicy(_Frozen):
    """When this agent replaces its older conversation with a summary (opt-in)."""

    trigger_tokens: Annotated[int, Field(gt=0), NUMBER]
    """Compact once the last call's input + cache-read + cache-write tokens reach this (a
    provider that reports no prompt tokens, or zero: the request's size at four bytes a token)."""
    keep_recent_turns: Annotated[int, Field(gt=0, le=100), NUMBER] = 3
    """Turns kept verbatim after the cut."""
    model: str | None = None
    """Model for the summariser call; ``None`` uses the agent's model."""
    max_summary_tokens: Annotated[int, Field(gt=0, le=32000), NUMBER] = 2048
    """Output cap of the summariser call."""
    summary_instructions: Annotated[str | None, Field(max_length=4000)] = None
    """Appended to the summariser's own system prompt."""


class SpawnEnvelope(_Frozen):
    """What a parent may compose at run time: tools, models, depth and breadth of children."""

    tools: tuple[str, ...] = ()
    """Which of the parent's code and HTTP tools (not MCP) a spawned child may hold; empty: all."""
    models: tuple[str, ...] = ()
    """Models a spawned child may use; empty = the parent's model."""
    max_depth: Annotated[int, Field(ge=1, le=16), NUMBER] = 2
    """How deep spawned children may nest."""
    max_alive: Annotated[int, Field(ge=1, le=32), NUMBER] = 3
    """Most spawned children alive at once."""
    may_message: bool = True
    """Whether the parent may message a live child."""

    @field_validator("tools", "models")
    @classmethod
    def _as_set(cls, value: tuple[str, ...], info: Any) -> tuple[str, ...]:
        return _sorted_unique_strings(value, info.field_name)


class Skill(_Frozen):
    """An instruction pack loaded on demand through ``load_skill``."""

    name: Name
    """Skill name, as ``load_skill`` and ``[[skill:name]]`` links refer to it."""
    description: Annotated[str, Field(min_length=1, max_length=1024)]
    """One line shown in the system prompt's skills index."""
    body: Annotated[str, Field(min_length=1)]
    """The instructions, loaded only when the model asks for them."""


class CodeTool(_Frozen):
    """A Python function the consumer registered at boot, referenced by name."""

    kind: Literal["code"] = "code"
    name: Name
    """The name the function was registered under in the worker's ToolRegistry."""
    interruptible: bool = True
    """Whether an abort may cancel the call while it runs."""


class HttpTool(_Frozen):
    """A tool that is entirely data, so an end user can create one at runtime."""

    kind: Literal["http"] = "http"
    name: Name
    """Tool name shown to the model."""
    description: Annotated[str, Field(min_length=1, max_length=4096)]
    """What the tool does, shown to the model."""
    url: Annotated[str, Field(min_length=1, max_length=2048)]
    """URL template; ``{placeholder}`` segments are filled from the call's arguments."""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    """HTTP method. POST and PATCH are not safe to repeat and are never sent twice."""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    """JSON schema of the arguments; must declare every URL placeholder."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Literal headers. Never credentials: ``Authorization``/``Cookie`` are refused."""
    credential: Annotated[str | None, Field(max_length=256)] = None
    """Name of a credential the SecretResolver turns into an ``Authorization`` header."""
    timeout_seconds: Annotated[float, Field(gt=0, le=600), NUMBER] = 30.0
    """Per-request timeout."""
    interruptible: bool = True
    """Whether an abort may cancel the call while it runs."""

    @field_validator("input_schema")
    @classmethod
    def _schema_is_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        return own_json(value)

    @field_validator("headers")
    @classmethod
    def _no_literal_credentials(cls, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(h for h in value if h.lower() in FORBIDDEN_HTTP_HEADERS)
        if bad:
            raise ValueError(
                f"literal {', '.join(bad)} header refused: name a credential instead "
                "(HttpTool.credential), which the SecretResolver resolves at call time"
            )
        return value


Tool = Annotated[CodeTool | HttpTool, Field(discriminator="kind")]


class McpOAuth(_Frozen):
    """OAuth 2.1 configuration for one MCP server."""

    grant: Literal["authorization_code", "client_credentials"] = "client_credentials"
    """Which grant obtains tokens for this server: ``client_credentials`` (the worker's own
    client secret) or ``authorization_code`` (a person consents; the Run suspends for it)."""
    preregistered_client_id: Annotated[str | None, Field(max_length=512)] = None
    """A client id registered with the authorization server ahead of time (public)."""
    client_secret_credential: Annotated[str | None, Field(max_length=256)] = None
    """Name of the credential holding the client secret; never the secret itself."""
    cimd_url: Annotated[str | None, Field(max_length=2048)] = None
    """URL of a client-id metadata document: the client id of an ``authorization_code``
    client without ``preregistered_client_id``, where the authorization server supports
    them."""
    allow_dynamic_registration: bool = True
    """Whether an ``authorization_code`` server with neither ``preregistered_client_id`` nor
    ``cimd_url`` gets a client by dynamic registration (RFC 7591): registered once per
    tenant, server and client metadata at the authorization server's
    ``registration_endpoint`` (none there fails the Run), kept in the workers' token store.
    False: such a server is refused at publish."""
    application_type: Literal["native", "web"] = "native"
    """OAuth application type in the client metadata of the ``authorization_code`` grant."""
    client_name: Annotated[str, Field(max_length=256)] = "psych"
    """Client name in the client metadata of the ``authorization_code`` grant."""
    redirect_uris: tuple[str, ...] = ()
    """Redirect URIs for authorization_code, in preference order (the first is used):
    where the operator serves psych's OAuth callback. Ordered."""


class McpServer(_Frozen):
    """An MCP connection, as data; its tools are discovered from the server."""

    name: Name
    """Server name; its tools reach the model as ``<server>__<tool>``."""
    url: Annotated[str, Field(min_length=1, max_length=2048)]
    """Endpoint URL."""
    transport: Literal["http", "sse"] = "http"
    """Streamable HTTP or SSE."""
    credential: Annotated[str | None, Field(max_length=256)] = None
    """Name of a credential sent as a bearer token."""
    oauth: McpOAuth | None = None
    """OAuth 2.1 configuration, when the server is behind an authorization server."""
    allow: tuple[str, ...] = ()
    """Tools granted out of what the server offers (exact or trailing ``*``); empty = all."""
    optional: bool = False
    """Whether the Run goes on (model told) when the server is unreachable."""
    preload: bool | None = None
    """Whether tools are discovered at Run start; ``None`` lets the runtime decide."""

    @field_validator("allow")
    @classmethod
    def _allow_as_set(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _sorted_unique_strings(value, "allow")


class A2APeer(_Frozen):
    """Another agent, reachable over A2A, that this agent may delegate to."""

    name: Name
    """Peer name."""
    url: Annotated[str, Field(min_length=1, max_length=2048)]
    """Base URL; the Agent Card is fetched from it at run time."""
    credential: Annotated[str | None, Field(max_length=256)] = None
    """Name of a credential sent with ``scheme``."""
    scheme: Annotated[str, Field(max_length=64)] = "Bearer"
    """Authorization scheme for the credential."""
    tenant: Annotated[str | None, Field(max_length=256)] = None
    """Tenant sent as the protocol says."""
    allow: tuple[str, ...] = ()
    """Skills granted out of the card's (exact or trailing ``*``); empty = all."""
    optional: bool = False
    """Whether the Run goes on (model told) when the peer is unreachable."""
    extensions: tuple[str, ...] = ()
    """A2A extension URIs to activate."""

    @field_validator("allow", "extensions")
    @classmethod
    def _as_set(cls, value: tuple[str, ...], info: Any) -> tuple[str, ...]:
        return _sorted_unique_strings(value, info.field_name)


class AgentSpec(_Frozen):
    """A Step that loops Turns until a stop condition."""

    kind: Literal["agent"] = "agent"
    name: Name
    """Agent name."""
    description: Annotated[str, Field(max_length=4096)] = ""
    """What this agent is for."""
    instructions: str = ""
    """The first block of the system prompt."""
    model: ModelRef
    """Which model, and how it is called."""
    tools: tuple[Tool, ...] = ()
    """Code and HTTP tools. Set-like: sorted by name, unique."""
    mcp_servers: tuple[McpServer, ...] = ()
    """MCP servers. Set-like: sorted by name, unique."""
    a2a_peers: tuple[A2APeer, ...] = ()
    """A2A peers. Set-like: sorted by name, unique."""
    skills: tuple[Skill, ...] = ()
    """Skills. Set-like: sorted by name, unique."""
    subagents: tuple[SubagentRef, ...] = ()
    """Subagents reachable through ``delegate``. Set-like: sorted by name, unique."""
    spawn: SpawnEnvelope | None = None
    """Permission to compose children at run time; ``None`` = no ``spawn`` tool."""
    compaction: CompactionPolicy | None = None
    """Conversation compaction; ``None`` = off."""
    limits: Limits = Field(default_factory=Limits)
    """Budgets."""
    suspension: SuspensionPolicy = Field(default_factory=SuspensionPolicy)
    """Suspension expiries."""
    tasks_enabled: bool = False
    """Whether the task-list tool is offered."""
    components_enabled: bool = False
    """Whether the model may attach structured display components."""
    answer_style: Literal["concise"] | None = None
    """Answer style block of the system prompt; ``None`` adds nothing."""

    @field_validator("tools", "mcp_servers", "a2a_peers", "skills", "subagents")
    @classmethod
    def _set_like(cls, value: tuple[Any, ...], info: Any) -> tuple[Any, ...]:
        return _sorted_unique_names(value, info.field_name.rstrip("s").replace("_", " "))


class SubagentRef(_Frozen):
    """A nested agent this Spec may delegate to; its Spec is embedded, not referenced."""

    name: Name
    """Name the model delegates to."""
    description: Annotated[str, Field(min_length=20, max_length=2048)]
    """When to delegate to it; shown in the subagents index (at least 20 characters)."""
    spec: AgentSpec
    """The subagent's whole Spec, pinned by the parent's hash."""


class AgentStep(_Frozen):
    """A workflow step that runs an agent."""

    kind: Literal["agent"] = "agent"
    name: Name
    """Step name, unique within the workflow."""
    spec: AgentSpec
    """The agent to run."""


class ToolStep(_Frozen):
    """A workflow step that calls one tool with fixed arguments."""

    kind: Literal["tool"] = "tool"
    name: Name
    """Step name, unique within the workflow."""
    tool: Name
    """Name of one of the workflow's tools."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments passed to the tool (plain JSON)."""

    @field_validator("arguments")
    @classmethod
    def _arguments_are_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        return own_json(value)


class WorkflowStepRef(_Frozen):
    """A workflow step that runs a nested workflow."""

    kind: Literal["workflow"] = "workflow"
    name: Name
    """Step name, unique within the workflow."""
    spec: WorkflowSpec
    """The nested workflow."""


Step = Annotated[AgentStep | ToolStep | WorkflowStepRef, Field(discriminator="kind")]


class WorkflowSpec(_Frozen):
    """A Step that sequences other Steps deterministically."""

    kind: Literal["workflow"] = "workflow"
    name: Name
    """Workflow name."""
    description: Annotated[str, Field(max_length=4096)] = ""
    """What this workflow is for."""
    steps: Annotated[tuple[Step, ...], Field(min_length=1)]
    """Steps, run in order. Ordered; names unique."""
    tools: tuple[Tool, ...] = ()
    """Tools its ToolSteps call. Set-like: sorted by name, unique."""
    mcp_servers: tuple[McpServer, ...] = ()
    """MCP servers. Set-like: sorted by name, unique."""
    limits: Limits = Field(default_factory=Limits)
    """Budgets."""
    suspension: SuspensionPolicy = Field(default_factory=SuspensionPolicy)
    """Suspension expiries."""

    @field_validator("tools", "mcp_servers")
    @classmethod
    def _set_like(cls, value: tuple[Any, ...], info: Any) -> tuple[Any, ...]:
        return _sorted_unique_names(value, info.field_name.rstrip("s").replace("_", " "))

    @field_validator("steps")
    @classmethod
    def _unique_step_names(cls, value: tuple[Any, ...]) -> tuple[Any, ...]:
        names = [step.name for step in value]
        if len(set(names)) < len(names):  # linear but for a Spec refused (decoded in Runs too)
            repeated = next(name for at, name in enumerate(names) if name in names[:at])
            raise ValueError(f"step name {repeated!r} appears more than once")
        return value


Spec = Annotated[AgentSpec | WorkflowSpec, Field(discriminator="kind")]
"""Either kind of Spec, discriminated on ``kind``."""

for _forward in (AgentSpec, WorkflowSpec, WorkflowStepRef):  # each names a later model
    _forward.model_rebuild()


class Scope(_Frozen):
    """Who a call is made for. Every entry point takes one; every Record carries it.

    The tenant owns its Runs: another tenant's Scope is refused (AccessDenied). Principal
    and labels are opaque to the runtime and passed through to ports and records.
    """

    tenant: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_.]+$")]
    """The owning tenant (letters, digits, ``_`` and ``.``; no ``-``, which joins ids)."""
    principal: Annotated[str | None, Field(max_length=256)] = None
    """Who acts within the tenant, if known (a Run starts only with one free of control
    characters, ``check_labels``)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Free-form labels carried into records and ports: a Run starts only with at most 32,
    each key 1 to 64 characters and each value at most 256 (``check_labels``)."""

    def check_labels(self) -> Scope:
        """This Scope, if its labels are within what a Run starts with: every record and
        every model and tool call of the Run carries them (checked where a Run starts, not
        when a payload is read: a Run started before the bound still reads back).

        Raises:
            SpecError: more than 32 labels, a key empty or over 64 characters, or a value
                over 256, naming it; a principal holding a control character (a NUL cannot
                even reach a command hook's environment, which names the principal).
        """
        principal = self.principal or ""
        control = next((c for c in principal if ord(c) < 0x20 or ord(c) == 0x7F), None)
        if control is not None:
            raise SpecError(
                f"principal {principal[:80]!r} holds the control character "
                f"U+{ord(control):04X}: a principal is a name, printable"
            )
        if len(self.labels) > 32:
            raise SpecError(f"{len(self.labels)} labels: a Run's Scope holds at most 32")
        for key, value in self.labels.items():
            if not 1 <= len(key) <= 64:
                raise SpecError(f"label key {key[:80]!r}: 1 to 64 characters, not {len(key)}")
            if len(value) > 256:
                raise SpecError(f"label {key!r}: its value is {len(value)} characters, at most 256")
        return self
