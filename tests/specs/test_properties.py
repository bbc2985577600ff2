"""Properties of Version hashes over generated Specs.

Order of set-like fields and a trip through a document never move the hash; any single
edit to a field, including the order of an ordered field, always does.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psych_runtime.specs import (
    A2APeer,
    AgentSpec,
    AgentStep,
    CodeTool,
    HttpTool,
    Limits,
    McpServer,
    ModelRef,
    Skill,
    SpawnEnvelope,
    ToolStep,
    Version,
    WorkflowSpec,
    parse_spec,
    spec_from_json,
    spec_from_yaml,
    spec_to_data,
    spec_to_json,
    spec_to_yaml,
    version_hash,
    version_wire_data,
)

pytestmark = pytest.mark.long

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# U+0085 is left out: PyYAML folds it on load, which test_version.py covers on its own.
TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x85"), max_size=24
)
NONEMPTY = TEXT.filter(bool)
NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,10}", fullmatch=True)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)

LIMIT_BOUNDS: dict[str, tuple[float, float, bool]] = {
    # field: (lowest allowed, highest allowed, is_float)
    "max_steps": (1, 10000, False),
    "max_turns": (1, 1000, False),
    "max_tool_calls_per_turn": (1, 256, False),
    "deadline_seconds": (0.5, 86400, True),
    "transient_retry_budget": (0, 100, False),
    "max_delegation_depth": (0, 16, False),
    "max_fanout_per_turn": (1, 64, False),
    "failure_streak_threshold": (1, 100, False),
    "failure_streak_hard_stop": (1, 200, False),
    "repeat_call_threshold": (1, 100, False),
    "repeat_call_hard_stop": (1, 200, False),
    "stream_idle_seconds": (0, 3600, True),
    "large_result_bytes": (1, 10**9, False),
    "max_history_records": (0, 20000, False),
}


def _limit_strategy(low: float, high: float, is_float: bool) -> st.SearchStrategy[Any]:
    if is_float:
        return st.floats(low, high, allow_nan=False)
    return st.integers(int(low), int(high))


LIMITS = st.fixed_dictionaries(
    {},
    optional={name: _limit_strategy(*bounds) for name, bounds in LIMIT_BOUNDS.items()},
).map(lambda fields: Limits(**fields))


@st.composite
def http_tools(draw: st.DrawFn, name: str) -> HttpTool:
    placeholders = draw(st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True), max_size=2))
    url = "https://api.test/" + "/".join(f"{{{p}}}" for p in placeholders)
    properties: dict[str, Any] = {p: {"type": "string"} for p in placeholders}
    properties.update(draw(st.dictionaries(st.from_regex(r"x[a-z]{0,4}", fullmatch=True), JSON)))
    return HttpTool(
        name=name,
        description=draw(NONEMPTY),
        url=url,
        method=draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"])),
        input_schema={"type": "object", "properties": properties},
        headers=draw(st.dictionaries(st.sampled_from(["Accept", "X-Trace", "User-Agent"]), TEXT)),
        credential=draw(st.none() | NAMES),
        timeout_seconds=draw(st.floats(0.1, 600)),
        interruptible=draw(st.booleans()),
    )


@st.composite
def tool_lists(draw: st.DrawFn) -> list[CodeTool | HttpTool]:
    names = draw(st.lists(NAMES, max_size=4, unique=True))
    tools: list[CodeTool | HttpTool] = []
    for name in names:
        if draw(st.booleans()):
            tools.append(CodeTool(name=name, interruptible=draw(st.booleans())))
        else:
            tools.append(draw(http_tools(name)))
    return tools


@st.composite
def mcp_servers(draw: st.DrawFn) -> list[McpServer]:
    names = draw(st.lists(NAMES, max_size=3, unique=True))
    return [
        McpServer(
            name=name,
            url=f"https://{name}.test/mcp",
            transport=draw(st.sampled_from(["http", "sse"])),
            allow=draw(st.lists(st.from_regex(r"[a-z_]{1,8}\*?", fullmatch=True), unique=True)),
            optional=draw(st.booleans()),
            preload=draw(st.none() | st.booleans()),
        )
        for name in names
    ]


@st.composite
def skill_lists(draw: st.DrawFn) -> list[Skill]:
    names = draw(st.lists(NAMES, max_size=4, unique=True))
    return [Skill(name=n, description=draw(NONEMPTY), body=draw(NONEMPTY)) for n in names]


@st.composite
def agent_specs(draw: st.DrawFn) -> AgentSpec:
    tools = draw(tool_lists())
    servers = draw(mcp_servers())
    spawn = None
    if draw(st.booleans()):
        own = [t.name for t in tools] + [f"{s.name}__x" for s in servers]
        spawn = SpawnEnvelope(
            tools=draw(st.lists(st.sampled_from(own), unique=True)) if own else (),
            models=draw(st.lists(NAMES, max_size=3, unique=True)),
            max_depth=draw(st.integers(1, 16)),
        )
    peers = [
        A2APeer(name=n, url="https://peer.test", allow=draw(st.lists(NAMES, unique=True)))
        for n in draw(st.lists(NAMES, max_size=2, unique=True))
    ]
    return AgentSpec(
        name=draw(NAMES),
        description=draw(TEXT),
        instructions=draw(TEXT),
        model=ModelRef(
            model=draw(NAMES),
            temperature=draw(st.none() | st.floats(0, 2)),
            top_p=draw(st.none() | st.floats(0.01, 1)),
            fallbacks=draw(st.lists(NAMES, max_size=3)),
        ),
        tools=tools,
        mcp_servers=servers,
        a2a_peers=peers,
        skills=draw(skill_lists()),
        spawn=spawn,
        limits=draw(LIMITS),
        tasks_enabled=draw(st.booleans()),
        answer_style=draw(st.none() | st.just("concise")),
    )


@st.composite
def workflow_specs(draw: st.DrawFn) -> WorkflowSpec:
    tools = draw(tool_lists())
    step_names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    steps: list[AgentStep | ToolStep] = []
    for name in step_names:
        if draw(st.booleans()):
            steps.append(AgentStep(name=name, spec=draw(agent_specs())))
        else:
            arguments = draw(st.dictionaries(TEXT, JSON, max_size=3))
            steps.append(ToolStep(name=name, tool=draw(NAMES), arguments=arguments))
    return WorkflowSpec(
        name=draw(NAMES),
        description=draw(TEXT),
        steps=steps,
        tools=tools,
        mcp_servers=draw(mcp_servers()),
        limits=draw(LIMITS),
    )


SPECS = agent_specs() | workflow_specs()


# --- permutations --------------------------------------------------------------------------


def _shuffle_set_like(data: dict[str, Any], rng: random.Random) -> None:
    for field in ("tools", "skills", "mcp_servers", "a2a_peers", "subagents"):
        if field in data:
            rng.shuffle(data[field])
    for server in data.get("mcp_servers", []):
        rng.shuffle(server["allow"])
    for peer in data.get("a2a_peers", []):
        rng.shuffle(peer["allow"])
    if data.get("spawn"):
        rng.shuffle(data["spawn"]["tools"])
        rng.shuffle(data["spawn"]["models"])
    for step in data.get("steps", []):
        if step["kind"] == "agent":
            _shuffle_set_like(step["spec"], rng)


@SETTINGS
@given(spec=SPECS, rng=st.randoms(use_true_random=False))
def test_hash_ignores_order_of_set_like_fields(
    spec: AgentSpec | WorkflowSpec, rng: random.Random
) -> None:
    data = spec_to_data(spec)
    _shuffle_set_like(data, rng)
    shuffled = parse_spec(data)
    assert shuffled == spec
    assert version_hash(shuffled) == version_hash(spec)


# --- document round trips ------------------------------------------------------------------


@SETTINGS
@given(spec=SPECS)
def test_hash_survives_json_and_yaml_round_trips(spec: AgentSpec | WorkflowSpec) -> None:
    digest = version_hash(spec)
    via_json = spec_from_json(spec_to_json(spec))
    via_yaml = spec_from_yaml(spec_to_yaml(spec))
    assert via_json == spec
    assert via_yaml == spec
    assert version_hash(via_json) == digest
    assert version_hash(via_yaml) == digest


@SETTINGS
@given(spec=SPECS)
def test_version_survives_json_and_yaml_round_trips(spec: AgentSpec | WorkflowSpec) -> None:
    version = Version.of(spec, datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC))
    assert Version.from_json(version.to_json()) == version
    assert Version.from_yaml(version.to_yaml()) == version
    assert Version.from_yaml(version.to_yaml()).hash == version_hash(spec)


@SETTINGS
@given(spec=SPECS)
def test_wire_form_reads_back_as_the_spec(spec: AgentSpec | WorkflowSpec) -> None:
    version = Version.of(spec, datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC))
    wire = version_wire_data(version)
    assert Version.model_validate_json(json.dumps(wire)) == version
    assert version_hash(parse_spec(wire["spec"])) == version.hash
    # The defaults are left out (the full dump is only the fallback).
    limits = wire["spec"].get("limits", {})
    assert all(value != Limits.model_fields[name].default for name, value in limits.items())
    assert len(json.dumps(wire["spec"])) < len(json.dumps(spec_to_data(spec)))


# --- single edits --------------------------------------------------------------------------

Edit = Callable[[dict[str, Any]], bool]
"""Change one thing in Spec data in place; False when the Spec has nothing to change."""


def _limit_edit(field: str) -> Edit:
    low, _, is_float = LIMIT_BOUNDS[field]

    def edit(data: dict[str, Any]) -> bool:
        value = data["limits"][field]
        data["limits"][field] = value - 1 if value - 1 >= low else value + 1
        if is_float:
            data["limits"][field] = float(data["limits"][field])
        return True

    return edit


def _first(data: dict[str, Any], field: str, kind: str | None = None) -> dict[str, Any] | None:
    return next(
        (item for item in data.get(field, []) if kind is None or item.get("kind") == kind), None
    )


def _http_description(data: dict[str, Any]) -> bool:
    tool = _first(data, "tools", "http")
    if tool is None:
        return False
    tool["description"] += "!"
    return True


def _http_header(data: dict[str, Any]) -> bool:
    tool = _first(data, "tools", "http")
    if tool is None:
        return False
    tool["headers"]["X-New"] = "1"
    return True


def _code_interruptible(data: dict[str, Any]) -> bool:
    tool = _first(data, "tools", "code")
    if tool is None:
        return False
    tool["interruptible"] = not tool["interruptible"]
    return True


def _skill_body(data: dict[str, Any]) -> bool:
    skill = _first(data, "skills")
    if skill is None:
        return False
    skill["body"] += " more"
    return True


def _mcp_allow(data: dict[str, Any]) -> bool:
    server = _first(data, "mcp_servers")
    if server is None:
        return False
    server["allow"] = [*server["allow"], "zz_only_new"]
    return True


def _mcp_optional(data: dict[str, Any]) -> bool:
    server = _first(data, "mcp_servers")
    if server is None:
        return False
    server["optional"] = not server["optional"]
    return True


def _instructions(data: dict[str, Any]) -> bool:
    if data["kind"] != "agent":
        return False
    data["instructions"] += "."
    return True


def _temperature(data: dict[str, Any]) -> bool:
    if data["kind"] != "agent":
        return False
    data["model"]["temperature"] = 1.25 if data["model"]["temperature"] != 1.25 else 0.5
    return True


def _reverse_fallbacks(data: dict[str, Any]) -> bool:
    if data["kind"] != "agent" or len(set(data["model"]["fallbacks"])) < 2:
        return False
    data["model"]["fallbacks"].reverse()
    fallbacks: list[str] = data["model"]["fallbacks"]
    return fallbacks != list(reversed(fallbacks))


def _add_fallback(data: dict[str, Any]) -> bool:
    if data["kind"] != "agent":
        return False
    data["model"]["fallbacks"].append("another-model")
    return True


def _reverse_steps(data: dict[str, Any]) -> bool:
    if data["kind"] != "workflow" or len(data["steps"]) < 2:
        return False
    data["steps"].reverse()
    return True


def _step_arguments(data: dict[str, Any]) -> bool:
    step = _first(data, "steps", "tool")
    if step is None:
        return False
    step["arguments"]["__edited__"] = True
    return True


def _nested_agent_limit(data: dict[str, Any]) -> bool:
    step = _first(data, "steps", "agent")
    if step is None:
        return False
    return _limit_edit("max_turns")(step["spec"])


def _rename(data: dict[str, Any]) -> bool:
    data["name"] = data["name"] + "2" if len(data["name"]) < 128 else "renamed"
    return True


EDITS: dict[str, Edit] = {
    **{f"limits.{field}": _limit_edit(field) for field in LIMIT_BOUNDS},
    "http.description": _http_description,
    "http.headers": _http_header,
    "code.interruptible": _code_interruptible,
    "skill.body": _skill_body,
    "mcp.allow": _mcp_allow,
    "mcp.optional": _mcp_optional,
    "instructions": _instructions,
    "model.temperature": _temperature,
    "model.fallbacks.reverse": _reverse_fallbacks,
    "model.fallbacks.append": _add_fallback,
    "steps.reverse": _reverse_steps,
    "steps.arguments": _step_arguments,
    "steps.agent.limits": _nested_agent_limit,
    "name": _rename,
}


@SETTINGS
@given(spec=SPECS)
def test_every_single_edit_moves_the_hash(spec: AgentSpec | WorkflowSpec) -> None:
    digest = version_hash(spec)
    original = spec_to_data(spec)
    for label, edit in EDITS.items():
        data = copy.deepcopy(original)
        if not edit(data):
            continue
        edited = parse_spec(data)
        assert edited != spec, label
        assert version_hash(edited) != digest, label


def test_edits_cover_every_limit() -> None:
    assert set(LIMIT_BOUNDS) == set(Limits.model_fields)
