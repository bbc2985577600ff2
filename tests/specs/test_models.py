"""The Spec models: bounds, defaults, immutability and collection rules of the seed API."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pytest
from pydantic import BaseModel, ValidationError

from psych_runtime.specs import (
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
    SpecError,
    SubagentRef,
    SuspensionPolicy,
    ToolStep,
    Version,
    WorkflowSpec,
    WorkflowStepRef,
    parse_spec,
    spec_from_json,
    spec_from_yaml,
    version_hash,
)

MODEL = ModelRef(model="gpt-4o")


def agent(**fields: Any) -> AgentSpec:
    return AgentSpec(**{"name": "a", "model": MODEL, **fields})


def http(**fields: Any) -> HttpTool:
    return HttpTool(**{"name": "h", "description": "d", "url": "https://x.test/", **fields})


# Every required argument each model needs, so a case can vary exactly one field.
REQUIRED: dict[type[BaseModel], dict[str, Any]] = {
    Limits: {},
    SuspensionPolicy: {},
    CompactionPolicy: {"trigger_tokens": 1000},
    SpawnEnvelope: {},
    SubagentRef: {"name": "sub", "description": "x" * 20, "spec": agent()},
    Skill: {"name": "s", "description": "d", "body": "b"},
    CodeTool: {"name": "c"},
    HttpTool: {"name": "h", "description": "d", "url": "https://x.test/"},
    McpServer: {"name": "m", "url": "https://mcp.test/"},
    McpOAuth: {},
    A2APeer: {"name": "p", "url": "https://peer.test/"},
    ModelRef: {"model": "gpt-4o"},
    AgentSpec: {"name": "a", "model": MODEL},
    WorkflowSpec: {"name": "w", "steps": [ToolStep(name="s", tool="t")]},
    AgentStep: {"name": "s", "spec": agent()},
    ToolStep: {"name": "s", "tool": "t"},
    WorkflowStepRef: {
        "name": "s",
        "spec": WorkflowSpec(name="inner", steps=[ToolStep(name="s", tool="t")]),
    },
}


_M = TypeVar("_M", bound=BaseModel)


def build(cls: type[_M], **fields: Any) -> _M:
    return cls(**{**REQUIRED[cls], **fields})


# (model, field, a value just outside the bound, the value on the bound that must pass)
BOUNDS: list[tuple[type[BaseModel], str, Any, Any]] = [
    (Limits, "max_steps", 0, 1),
    (Limits, "max_steps", 10001, 10000),
    (Limits, "max_turns", 0, 1),
    (Limits, "max_turns", 1001, 1000),
    (Limits, "max_tool_calls_per_turn", 0, 1),
    (Limits, "max_tool_calls_per_turn", 257, 256),
    (Limits, "deadline_seconds", 0.0, 0.001),
    (Limits, "deadline_seconds", 86400.5, 86400.0),
    (Limits, "transient_retry_budget", -1, 0),
    (Limits, "transient_retry_budget", 101, 100),
    (Limits, "max_delegation_depth", -1, 0),
    (Limits, "max_delegation_depth", 17, 16),
    (Limits, "max_fanout_per_turn", 0, 1),
    (Limits, "max_fanout_per_turn", 65, 64),
    (Limits, "failure_streak_threshold", 0, 1),
    (Limits, "failure_streak_threshold", 101, 100),
    (Limits, "failure_streak_hard_stop", 0, 1),
    (Limits, "failure_streak_hard_stop", 201, 200),
    (Limits, "repeat_call_threshold", 0, 1),
    (Limits, "repeat_call_threshold", 101, 100),
    (Limits, "repeat_call_hard_stop", 0, 1),
    (Limits, "repeat_call_hard_stop", 201, 200),
    (Limits, "stream_idle_seconds", -0.001, 0.0),
    (Limits, "stream_idle_seconds", 3600.5, 3600.0),
    (Limits, "large_result_bytes", 0, 1),
    (Limits, "max_history_records", -1, 0),
    (Limits, "max_history_records", 20001, 20000),
    (SuspensionPolicy, "approval_expires_seconds", 0.0, 0.001),
    (SuspensionPolicy, "question_expires_seconds", 0.0, 0.001),
    (SuspensionPolicy, "external_expires_seconds", 0.0, 0.001),
    (SuspensionPolicy, "children_expires_seconds", 0.0, 0.001),
    (SuspensionPolicy, "approval_expires_seconds", -1.0, 1e9),
    (CompactionPolicy, "trigger_tokens", 0, 1),
    (CompactionPolicy, "keep_recent_turns", 0, 1),
    (CompactionPolicy, "keep_recent_turns", 101, 100),
    (CompactionPolicy, "max_summary_tokens", 0, 1),
    (CompactionPolicy, "max_summary_tokens", 32001, 32000),
    (CompactionPolicy, "summary_instructions", "x" * 4001, "x" * 4000),
    (SpawnEnvelope, "max_depth", 0, 1),
    (SpawnEnvelope, "max_depth", 17, 16),
    (SpawnEnvelope, "max_alive", 0, 1),
    (SpawnEnvelope, "max_alive", 33, 32),
    (SubagentRef, "description", "x" * 19, "x" * 20),
    (SubagentRef, "description", "x" * 2049, "x" * 2048),
    (SubagentRef, "name", "9sub", "_sub"),
    (Skill, "description", "", "x"),
    (Skill, "description", "x" * 1025, "x" * 1024),
    (Skill, "body", "", "x"),
    (Skill, "name", "-skill", "skill-1.a_b"),
    (CodeTool, "name", "has space", "has_underscore"),
    (HttpTool, "description", "", "x"),
    (HttpTool, "description", "x" * 4097, "x" * 4096),
    (HttpTool, "url", "", "u"),
    (HttpTool, "url", "u" * 2049, "u" * 2048),
    (HttpTool, "timeout_seconds", 0.0, 0.001),
    (HttpTool, "timeout_seconds", 600.5, 600.0),
    (HttpTool, "method", "HEAD", "DELETE"),
    (HttpTool, "method", "post", "PATCH"),
    (HttpTool, "credential", "c" * 257, "c" * 256),
    (McpServer, "transport", "stdio", "sse"),
    (McpServer, "transport", "websocket", "http"),
    (McpServer, "url", "", "u"),
    (McpServer, "url", "u" * 2049, "u" * 2048),
    (McpServer, "credential", "c" * 257, "c" * 256),
    (McpOAuth, "grant", "password", "authorization_code"),
    (McpOAuth, "grant", "implicit", "client_credentials"),
    (McpOAuth, "preregistered_client_id", "c" * 513, "c" * 512),
    (McpOAuth, "client_secret_credential", "c" * 257, "c" * 256),
    (McpOAuth, "cimd_url", "u" * 2049, "u" * 2048),
    (McpOAuth, "client_name", "n" * 257, "n" * 256),
    (McpOAuth, "application_type", "desktop", "web"),
    (A2APeer, "scheme", "s" * 65, "s" * 64),
    (A2APeer, "url", "", "u"),
    (A2APeer, "url", "u" * 2049, "u" * 2048),
    (A2APeer, "credential", "c" * 257, "c" * 256),
    (A2APeer, "tenant", "t" * 257, "t" * 256),
    (ModelRef, "model", "", "m"),
    (ModelRef, "model", "m" * 257, "m" * 256),
    (ModelRef, "temperature", -0.01, 0.0),
    (ModelRef, "temperature", 2.01, 2.0),
    (ModelRef, "top_p", 0.0, 1e-9),
    (ModelRef, "top_p", 1.01, 1.0),
    (ModelRef, "max_output_tokens", 0, 1),
    (ModelRef, "reasoning_effort", "extreme", "high"),
    (ModelRef, "reasoning_effort", "none", "low"),
    (AgentSpec, "name", "a" * 129, "a" * 128),
    (AgentSpec, "name", "1agent", "_agent"),
    (AgentSpec, "name", ".agent", "Agent.v2-x_y"),
    (AgentSpec, "name", "", "A"),
    (AgentSpec, "name", "bad/name", "good-name"),
    (AgentSpec, "description", "d" * 4097, "d" * 4096),
    (AgentSpec, "answer_style", "verbose", "concise"),
    (WorkflowSpec, "name", "bad name", "good_name"),
    (WorkflowSpec, "description", "d" * 4097, "d" * 4096),
    (ToolStep, "tool", "no way", "tool.name"),
]


def _case_id(case: tuple[type[BaseModel], str, Any, Any]) -> str:
    cls, field, bad, _ = case
    shown = repr(bad) if len(repr(bad)) < 12 else f"len{len(bad)}"
    return f"{cls.__name__}.{field}={shown}"


@pytest.mark.parametrize("case", BOUNDS, ids=[_case_id(c) for c in BOUNDS])
def test_value_outside_bound_is_refused(case: tuple[type[BaseModel], str, Any, Any]) -> None:
    cls, field, bad, _ = case
    with pytest.raises(ValidationError) as info:
        build(cls, **{field: bad})
    assert [e["loc"][0] for e in info.value.errors()] == [field]


@pytest.mark.parametrize("case", BOUNDS, ids=[_case_id(c) for c in BOUNDS])
def test_value_on_bound_is_accepted(case: tuple[type[BaseModel], str, Any, Any]) -> None:
    cls, field, _, good = case
    assert getattr(build(cls, **{field: good}), field) == good


@pytest.mark.parametrize(
    "cls", [Limits, SuspensionPolicy, ModelRef, HttpTool], ids=lambda c: c.__name__
)
def test_nan_and_infinity_refused_in_float_fields(cls: type[BaseModel]) -> None:
    field = {
        Limits: "deadline_seconds",
        SuspensionPolicy: "external_expires_seconds",
        ModelRef: "temperature",
        HttpTool: "timeout_seconds",
    }[cls]
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValidationError):
            build(cls, **{field: value})


def _unwrapped(kind: Any) -> Any:
    return typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind


def _numeric_fields() -> list[tuple[type[BaseModel], str]]:
    found = []
    for cls in REQUIRED:
        for name, field in cls.model_fields.items():
            kinds = typing.get_args(field.annotation) or (field.annotation,)
            bare = {_unwrapped(kind) for kind in kinds}
            if int in bare or float in bare:
                found.append((cls, name))
    return found


NUMERIC_FIELDS = _numeric_fields()


@pytest.mark.parametrize(
    ("cls", "field"), NUMERIC_FIELDS, ids=[f"{c.__name__}.{f}" for c, f in NUMERIC_FIELDS]
)
def test_a_number_field_refuses_a_boolean(cls: type[BaseModel], field: str) -> None:
    # From an audit: `temperature: true` was read as 1.0 and `max_turns: false` as 0.
    for value in (True, False):
        with pytest.raises(ValidationError) as info:
            build(cls, **{field: value})
        ((error,),) = [info.value.errors()]
        assert error["loc"][0] == field
        assert f"not the boolean {str(value).lower()}" in error["msg"]


def test_a_number_field_takes_what_reads_as_a_number() -> None:
    # YAML reads `3.6e3` as text; JSON from code may say 30.0 for an int.
    limits = Limits.model_validate({"deadline_seconds": "3.6e3", "max_turns": 30.0})
    assert (limits.deadline_seconds, limits.max_turns) == (3600.0, 30)


def test_an_integer_field_takes_exponent_text_as_json_takes_the_number() -> None:
    # YAML 1.1 reads `1e3` as text: `max_steps: 1e3` was refused ("unable to parse string
    # as an integer") where the same JSON document's 1e3 was read as 1000.
    head = "kind: agent\nname: a\nmodel: {model: m}\n"
    from_yaml = spec_from_yaml(head + "limits: {max_steps: 1e3, max_turns: 3.2E+1}\n")
    from_json = spec_from_json(
        '{"kind": "agent", "name": "a", "model": {"model": "m"},'
        ' "limits": {"max_steps": 1e3, "max_turns": 3.2E+1}}'
    )
    assert (from_yaml.limits.max_steps, from_yaml.limits.max_turns) == (1000, 32)
    assert version_hash(from_yaml) == version_hash(from_json)
    # Not a whole number, or not a number: refused as before, naming the field.
    for text in ("1.25e1", "1e3x", "1e999"):
        with pytest.raises(SpecError, match=r"limits\.max_steps"):
            spec_from_yaml(head + f"limits: {{max_steps: {text}}}\n")


def test_the_number_fields_are_found() -> None:
    assert len(NUMERIC_FIELDS) >= 27
    assert (ModelRef, "temperature") in NUMERIC_FIELDS and (Limits, "max_turns") in NUMERIC_FIELDS


def test_name_pattern_is_the_seeds() -> None:
    assert NAME_PATTERN == r"^[a-zA-Z_][a-zA-Z0-9_.-]{0,127}$"


@pytest.mark.parametrize(
    "header", ["Authorization", "authorization", "AUTHORIZATION", "Cookie", "cookie", "CoOkIe"]
)
def test_http_tool_refuses_literal_credential_headers(header: str) -> None:
    with pytest.raises(ValidationError) as info:
        http(headers={"Accept": "application/json", header: "Bearer secret"})
    assert info.value.errors()[0]["loc"] == ("headers",)
    assert header in str(info.value)
    assert "credential" in str(info.value)


def test_http_tool_keeps_harmless_headers() -> None:
    tool = http(headers={"Accept": "application/json", "X-Authorization-Hint": "none"})
    assert tool.headers == {"Accept": "application/json", "X-Authorization-Hint": "none"}


def test_workflow_needs_at_least_one_step() -> None:
    with pytest.raises(ValidationError) as info:
        WorkflowSpec(name="w", steps=[])
    assert info.value.errors()[0]["loc"] == ("steps",)


def test_workflow_step_names_are_unique() -> None:
    with pytest.raises(ValidationError, match="'twice' appears more than once"):
        WorkflowSpec(
            name="w",
            steps=[
                ToolStep(name="twice", tool="t"),
                AgentStep(name="other", spec=agent()),
                AgentStep(name="twice", spec=agent()),
            ],
        )


def test_workflow_step_names_unique_through_parse_spec() -> None:
    data = {
        "kind": "workflow",
        "name": "w",
        "steps": [{"kind": "tool", "name": "x", "tool": "t"}] * 2,
    }
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    # Named at the steps, in the validator's own words (no "Value error," of pydantic's).
    assert str(info.value).splitlines()[1:] == ["steps: step name 'x' appears more than once"]
    tools = [{"kind": "code", "name": "t"}] * 2
    with pytest.raises(SpecError) as info:
        parse_spec({**data, "steps": data["steps"][:1], "tools": tools})
    assert str(info.value).splitlines()[1:] == ["tools: tool name 't' appears more than once"]


# --- parse_spec names the offending path ---------------------------------------------------

BASE_AGENT: dict[str, Any] = {"kind": "agent", "name": "a", "model": {"model": "gpt-4o"}}
HTTP_TOOL: dict[str, Any] = {
    "kind": "http",
    "name": "h",
    "description": "d",
    "url": "https://x.test/",
}


MCP: dict[str, Any] = {"name": "m", "url": "u"}
SUB: dict[str, Any] = {"name": "s", "description": "x" * 20, "spec": BASE_AGENT}
BAD_CHILD = {**BASE_AGENT, "limits": {"max_turns": 0}}


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({"limits": {"max_turns": 0}}, "limits.max_turns"),
        ({"limits": {"max_steps": 10001}}, "limits.max_steps"),
        ({"suspension": {"approval_expires_seconds": 0}}, "suspension.approval_expires_seconds"),
        (
            {"compaction": {"trigger_tokens": 10, "keep_recent_turns": 0}},
            "compaction.keep_recent_turns",
        ),
        ({"spawn": {"max_depth": 17}}, "spawn.max_depth"),
        ({"model": {"model": "m", "temperature": 3}}, "model.temperature"),
        ({"model": {"model": "m", "top_p": 0}}, "model.top_p"),
        ({"tools": [{**HTTP_TOOL, "url": ""}]}, "tools[0].url"),
        (
            {"tools": [{"kind": "code", "name": "c"}, {**HTTP_TOOL, "timeout_seconds": 601}]},
            "tools[1].timeout_seconds",
        ),
        ({"tools": [{**HTTP_TOOL, "headers": {"Cookie": "x"}}]}, "tools[0].headers"),
        ({"skills": [{"name": "s", "description": "", "body": "b"}]}, "skills[0].description"),
        ({"mcp_servers": [{**MCP, "transport": "stdio"}]}, "mcp_servers[0].transport"),
        ({"mcp_servers": [{**MCP, "oauth": {"grant": "password"}}]}, "mcp_servers[0].oauth.grant"),
        ({"a2a_peers": [{"name": "p", "url": "u", "scheme": "s" * 65}]}, "a2a_peers[0].scheme"),
        ({"subagents": [{**SUB, "description": "short"}]}, "subagents[0].description"),
        ({"subagents": [{**SUB, "spec": BAD_CHILD}]}, "subagents[0].spec.limits.max_turns"),
        ({"name": "9lives"}, "name"),
        ({"answer_style": "verbose"}, "answer_style"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_parse_spec_error_names_the_path(extra: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE_AGENT, **extra})
    lines = str(info.value).splitlines()[1:]
    assert any(line.startswith(f"{path}: ") for line in lines), str(info.value)


def test_parse_spec_names_every_problem_at_once() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE_AGENT, "limits": {"max_turns": 0, "max_steps": 0}, "name": "1"})
    message = str(info.value)
    for path in ("limits.max_turns", "limits.max_steps", "name"):
        assert f"\n{path}: " in message


def test_parse_spec_workflow_step_path() -> None:
    data = {
        "kind": "workflow",
        "name": "w",
        "steps": [
            {"kind": "tool", "name": "ok", "tool": "t"},
            {"kind": "agent", "name": "bad", "spec": {**BASE_AGENT, "limits": {"max_turns": 0}}},
        ],
    }
    with pytest.raises(SpecError, match=r"steps\[1\]\.spec\.limits\.max_turns: "):
        parse_spec(data)


def test_parse_spec_requires_a_mapping_and_a_kind() -> None:
    with pytest.raises(SpecError, match="mapping"):
        parse_spec(["not", "a", "mapping"])
    with pytest.raises(SpecError, match="kind"):
        parse_spec({"name": "a", "model": {"model": "m"}})
    with pytest.raises(SpecError):
        parse_spec({**BASE_AGENT, "kind": "robot"})


def test_parse_spec_discriminates_on_kind() -> None:
    spec = parse_spec(
        {
            **BASE_AGENT,
            "tools": [HTTP_TOOL, {"kind": "code", "name": "c"}],
        }
    )
    assert isinstance(spec, AgentSpec)
    assert [type(t) for t in spec.tools] == [CodeTool, HttpTool]
    workflow = parse_spec(
        {
            "kind": "workflow",
            "name": "w",
            "steps": [
                {"kind": "tool", "name": "t", "tool": "x"},
                {"kind": "agent", "name": "a", "spec": BASE_AGENT},
                {
                    "kind": "workflow",
                    "name": "n",
                    "spec": {
                        "kind": "workflow",
                        "name": "i",
                        "steps": [{"kind": "tool", "name": "t", "tool": "x"}],
                    },
                },
            ],
        }
    )
    assert isinstance(workflow, WorkflowSpec)
    assert [type(s) for s in workflow.steps] == [ToolStep, AgentStep, WorkflowStepRef]


# --- defaults ------------------------------------------------------------------------------

LIMITS_DEFAULTS = {
    "max_steps": 48,
    "max_turns": 32,
    "max_tool_calls_per_turn": 16,
    "deadline_seconds": 900.0,
    "transient_retry_budget": 8,
    "max_delegation_depth": 3,
    "max_fanout_per_turn": 4,
    "failure_streak_threshold": 3,
    "failure_streak_hard_stop": 6,
    "repeat_call_threshold": 3,
    "repeat_call_hard_stop": 6,
    "stream_idle_seconds": 300.0,
    "large_result_bytes": 32768,
    "max_history_records": 300,
}
SUSPENSION_DEFAULTS = {
    "approval_expires_seconds": 86400.0,
    "question_expires_seconds": 86400.0,
    "external_expires_seconds": 604800.0,
    "children_expires_seconds": 3600.0,
    "may_ask_questions": False,
}

# The whole dump: a missing, extra or re-defaulted field fails the comparison.
DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {
    Limits: LIMITS_DEFAULTS,
    SuspensionPolicy: SUSPENSION_DEFAULTS,
    CompactionPolicy: {
        "trigger_tokens": 1000,
        "keep_recent_turns": 3,
        "model": None,
        "max_summary_tokens": 2048,
        "summary_instructions": None,
    },
    SpawnEnvelope: {"tools": (), "models": (), "max_depth": 2, "max_alive": 3, "may_message": True},
    McpOAuth: {
        "grant": "client_credentials",
        "preregistered_client_id": None,
        "client_secret_credential": None,
        "cimd_url": None,
        "allow_dynamic_registration": True,
        "application_type": "native",
        "client_name": "psych",
        "redirect_uris": (),
    },
    HttpTool: {
        "kind": "http",
        "name": "h",
        "description": "d",
        "url": "https://x.test/",
        "method": "POST",
        "input_schema": {},
        "headers": {},
        "credential": None,
        "timeout_seconds": 30.0,
        "interruptible": True,
    },
    CodeTool: {"kind": "code", "name": "c", "interruptible": True},
    McpServer: {
        "name": "m",
        "url": "https://mcp.test/",
        "transport": "http",
        "credential": None,
        "oauth": None,
        "allow": (),
        "optional": False,
        "preload": None,
    },
    A2APeer: {
        "name": "p",
        "url": "https://peer.test/",
        "credential": None,
        "scheme": "Bearer",
        "tenant": None,
        "allow": (),
        "optional": False,
        "extensions": (),
    },
    ModelRef: {
        "model": "gpt-4o",
        "temperature": None,
        "top_p": None,
        "max_output_tokens": None,
        "reasoning_effort": None,
        "fallbacks": (),
    },
    ToolStep: {"kind": "tool", "name": "s", "tool": "t", "arguments": {}},
    AgentSpec: {
        "kind": "agent",
        "name": "a",
        "description": "",
        "instructions": "",
        "model": {
            "model": "gpt-4o",
            "temperature": None,
            "top_p": None,
            "max_output_tokens": None,
            "reasoning_effort": None,
            "fallbacks": (),
        },
        "tools": (),
        "mcp_servers": (),
        "a2a_peers": (),
        "skills": (),
        "subagents": (),
        "spawn": None,
        "compaction": None,
        "limits": LIMITS_DEFAULTS,
        "suspension": SUSPENSION_DEFAULTS,
        "tasks_enabled": False,
        "components_enabled": False,
        "answer_style": None,
    },
    WorkflowSpec: {
        "kind": "workflow",
        "name": "w",
        "description": "",
        "steps": ({"kind": "tool", "name": "s", "tool": "t", "arguments": {}},),
        "tools": (),
        "mcp_servers": (),
        "limits": LIMITS_DEFAULTS,
        "suspension": SUSPENSION_DEFAULTS,
    },
}


@pytest.mark.parametrize("cls", list(DEFAULTS), ids=lambda c: c.__name__)
def test_defaults_are_the_seeds(cls: type[BaseModel]) -> None:
    assert build(cls).model_dump() == DEFAULTS[cls]


def test_compaction_needs_trigger_tokens() -> None:
    with pytest.raises(ValidationError) as info:
        CompactionPolicy()  # type: ignore[call-arg]
    assert info.value.errors()[0]["loc"] == ("trigger_tokens",)


def test_agent_spec_needs_a_model() -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(name="a")  # type: ignore[call-arg]
    assert info.value.errors()[0]["loc"] == ("model",)


def test_default_limits_are_fresh_but_equal() -> None:
    assert agent().limits == Limits()
    assert agent().suspension == SuspensionPolicy()


# --- frozen, closed ------------------------------------------------------------------------

ALL_MODELS = list(REQUIRED)


@pytest.mark.parametrize("cls", ALL_MODELS, ids=lambda c: c.__name__)
def test_models_are_frozen(cls: type[BaseModel]) -> None:
    instance = build(cls)
    field = next(iter(type(instance).model_fields))
    before = getattr(instance, field)
    with pytest.raises(ValidationError, match="frozen"):
        setattr(instance, field, before)
    assert getattr(instance, field) == before


@pytest.mark.parametrize("cls", ALL_MODELS, ids=lambda c: c.__name__)
def test_unknown_fields_refused(cls: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as info:
        build(cls, not_a_field=1)
    assert info.value.errors()[0]["type"] == "extra_forbidden"
    assert info.value.errors()[0]["loc"] == ("not_a_field",)


def test_nested_json_fields_do_not_share_the_callers_values() -> None:
    # Frozen means frozen all the way down: a mapping or list the caller keeps and changes
    # after building the Spec must not change the Spec, nor move its Version's hash.
    schema: dict[str, Any] = {"type": "object", "properties": {"id": {"type": "string"}}}
    arguments: dict[str, Any] = {"ids": ["1"], "filter": {"state": "open"}}
    tool = HttpTool(name="h", description="d", url="https://x.test/{id}", input_schema=schema)
    step = ToolStep(name="s", tool="h", arguments=arguments)
    spec = WorkflowSpec(name="w", steps=[step], tools=[tool])
    version = Version.of(spec)
    schema["properties"]["id"]["type"] = "integer"
    arguments["ids"].append("2")
    arguments["filter"]["state"] = "closed"
    assert tool.input_schema == {"type": "object", "properties": {"id": {"type": "string"}}}
    assert step.arguments == {"ids": ["1"], "filter": {"state": "open"}}
    assert version.verify() is version


def test_every_model_has_its_signature_on_import() -> None:
    # help() and inspect read the signature pydantic sets when a model is complete; a model
    # naming a later one (WorkflowStepRef -> WorkflowSpec) had "()" until first used.
    code = (
        "import inspect\n"
        "from psych_runtime.specs import _models as m\n"
        "for name in dir(m):\n"
        "    cls = getattr(m, name)\n"
        "    if isinstance(cls, type) and issubclass(cls, m.BaseModel) and cls.model_fields:\n"
        "        print(name, list(inspect.signature(cls).parameters))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    signatures = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert signatures["WorkflowStepRef"] == "['kind', 'name', 'spec']"
    assert all(params != "[]" for params in signatures.values()), signatures


def test_models_hold_no_callables() -> None:
    def fn() -> None:
        """A function."""

    with pytest.raises(ValidationError):
        CodeTool(name=fn)
    with pytest.raises(ValidationError):
        agent(tools=[fn])


def test_spec_tools_discriminated_by_kind() -> None:
    spec = agent(tools=[{"kind": "code", "name": "c"}, {**HTTP_TOOL, "name": "b"}])
    assert [type(t) for t in spec.tools] == [HttpTool, CodeTool]
    with pytest.raises(ValidationError):
        agent(tools=[{"kind": "python", "name": "c"}])


# --- set-like and ordered collections ------------------------------------------------------


def test_agent_set_like_collections_sorted() -> None:
    sub = agent(name="child")
    spec = agent(
        tools=[http(name="zeta"), CodeTool(name="alpha"), CodeTool(name="mid")],
        skills=[Skill(name=n, description="d", body="b") for n in ("s3", "s1", "s2")],
        mcp_servers=[McpServer(name=n, url="u") for n in ("mz", "ma")],
        a2a_peers=[A2APeer(name=n, url="u") for n in ("pz", "pa", "pm")],
        subagents=[SubagentRef(name=n, description="x" * 20, spec=sub) for n in ("z", "b")],
    )
    assert [t.name for t in spec.tools] == ["alpha", "mid", "zeta"]
    assert [s.name for s in spec.skills] == ["s1", "s2", "s3"]
    assert [m.name for m in spec.mcp_servers] == ["ma", "mz"]
    assert [p.name for p in spec.a2a_peers] == ["pa", "pm", "pz"]
    assert [s.name for s in spec.subagents] == ["b", "z"]


def test_workflow_set_like_collections_sorted() -> None:
    spec = build(
        WorkflowSpec,
        tools=[CodeTool(name="b"), http(name="a")],
        mcp_servers=[McpServer(name="y", url="u"), McpServer(name="x", url="u")],
    )
    assert [t.name for t in spec.tools] == ["a", "b"]
    assert [m.name for m in spec.mcp_servers] == ["x", "y"]


@pytest.mark.parametrize(
    ("cls", "field", "items"),
    [
        (AgentSpec, "tools", [CodeTool(name="t"), http(name="t")]),
        (AgentSpec, "skills", [Skill(name="s", description="d", body=b) for b in "ab"]),
        (AgentSpec, "mcp_servers", [McpServer(name="m", url=u) for u in "ab"]),
        (AgentSpec, "a2a_peers", [A2APeer(name="p", url=u) for u in "ab"]),
        (
            AgentSpec,
            "subagents",
            [SubagentRef(name="s", description=d * 20, spec=agent()) for d in "ab"],
        ),
        (WorkflowSpec, "tools", [CodeTool(name="t"), CodeTool(name="t")]),
        (WorkflowSpec, "mcp_servers", [McpServer(name="m", url=u) for u in "ab"]),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", None),
)
def test_set_like_collections_refuse_repeated_names(
    cls: type[BaseModel], field: str, items: list[Any]
) -> None:
    with pytest.raises(ValidationError) as info:
        build(cls, **{field: items})
    assert info.value.errors()[0]["loc"] == (field,)
    assert "more than once" in str(info.value)


@pytest.mark.parametrize(
    ("cls", "field"),
    [
        (McpServer, "allow"),
        (A2APeer, "allow"),
        (A2APeer, "extensions"),
        (SpawnEnvelope, "tools"),
        (SpawnEnvelope, "models"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_string_sets_sorted_and_unique(cls: type[BaseModel], field: str) -> None:
    assert getattr(build(cls, **{field: ["c", "a*", "b"]}), field) == ("a*", "b", "c")
    with pytest.raises(ValidationError) as info:
        build(cls, **{field: ["b", "a", "b"]})
    assert info.value.errors()[0]["loc"] == (field,)
    assert "'b'" in str(info.value)


def test_ordered_collections_keep_order() -> None:
    steps = [ToolStep(name=n, tool="t") for n in ("zeta", "alpha", "mid")]
    assert [s.name for s in WorkflowSpec(name="w", steps=steps).steps] == ["zeta", "alpha", "mid"]
    fallbacks = ("z-model", "a-model", "m-model")
    assert ModelRef(model="x", fallbacks=fallbacks).fallbacks == fallbacks
    uris = ("https://z.test/cb", "https://a.test/cb")
    assert McpOAuth(redirect_uris=uris).redirect_uris == uris


def test_collections_are_tuples() -> None:
    spec = agent(tools=[CodeTool(name="a")], skills=[Skill(name="s", description="d", body="b")])
    assert isinstance(spec.tools, tuple)
    assert isinstance(spec.skills, tuple)
    assert isinstance(ModelRef(model="m", fallbacks=["x"]).fallbacks, tuple)


def test_a_scopes_labels_are_bounded_where_a_run_starts() -> None:
    # Until 12-06 labels had no bound, though every record and every model and tool call
    # of a Run carries them: 3 MB of labels failed dispatch with Temporal's "Blob data
    # size exceeds limit", smaller ones grew the Run's history by their size per call.
    at_bounds = {f"key{i:02d}" + "k" * 59: "v" * 256 for i in range(32)}
    assert Scope(tenant="acme", labels=at_bounds).check_labels().labels == at_bounds
    too_many = {f"k{i}": "v" for i in range(33)}
    for labels, said in [
        (too_many, "33 labels: a Run's Scope holds at most 32"),
        ({"k" * 65: "v"}, "1 to 64 characters, not 65"),
        ({"": "v"}, "label key '': 1 to 64 characters, not 0"),
        ({"k": "v" * 257}, "label 'k': its value is 257 characters, at most 256"),
    ]:
        scope = Scope(tenant="acme", labels=labels)  # read back as it was: Runs before the bound
        with pytest.raises(SpecError, match=re.escape(said)):
            scope.check_labels()
    # A principal with a NUL made every command pre hook deny ("embedded null byte": the
    # hook's environment names the principal): refused where the Run starts, as labels are.
    for principal in ("ana\x00", "ana\nbob"):
        with pytest.raises(SpecError, match="holds the control character U\\+000"):
            Scope(tenant="acme", principal=principal).check_labels()
    assert Scope(tenant="acme", principal="Ana Müller").check_labels().principal == "Ana Müller"


async def test_a_run_does_not_start_with_labels_past_the_bounds(tmp_path: Path) -> None:
    # Checked by dispatch itself (the HTTP API and the CLI go through it), before any call
    # to the server: the client's server is a port where nothing listens.
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from psych_runtime.activities.versions import FileVersionStore
    from psych_runtime.workflows import PsychClient

    temporal = await Client.connect(
        "127.0.0.1:9", lazy=True, data_converter=pydantic_data_converter
    )
    client = PsychClient(temporal, store=FileVersionStore(tmp_path))
    scope = Scope(tenant="acme", labels={"k": "v" * 257})
    with pytest.raises(SpecError, match="label 'k': its value is 257 characters"):
        await client.dispatch(agent(), "hi", scope=scope)
    nul = Scope(tenant="acme", principal="ana\x00")
    with pytest.raises(SpecError, match="holds the control character U\\+0000"):
        await client.dispatch(agent(), "hi", scope=nul)
