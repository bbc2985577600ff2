"""Canonical bytes, version hashes, Versions and their JSON/YAML documents."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from psych_runtime.specs import (
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
    SpecError,
    SubagentRef,
    SuspensionPolicy,
    ToolStep,
    Version,
    VersionMismatch,
    WorkflowSpec,
    WorkflowStepRef,
    canonical_bytes,
    parse_spec,
    spec_from_json,
    spec_from_yaml,
    spec_to_data,
    spec_to_json,
    spec_to_yaml,
    version_hash,
    version_wire_data,
)

HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def minimal() -> AgentSpec:
    return AgentSpec(name="a", model=ModelRef(model="gpt-4o"))


def rich_agent() -> AgentSpec:
    child = AgentSpec(name="child", model=ModelRef(model="gpt-4o-mini"), instructions="Help.")
    return AgentSpec(
        name="support",
        description="Customer support — für alle Kunden ✓",
        instructions="Help the customer with their order.",
        model=ModelRef(
            model="gpt-4o",
            temperature=0.2,
            top_p=0.9,
            max_output_tokens=1024,
            reasoning_effort="medium",
            fallbacks=("gpt-4o-mini", "claude"),
        ),
        tools=(
            CodeTool(name="lookup_order", interruptible=False),
            HttpTool(
                name="issue_refund",
                description="Issue a refund for an order.",
                url="https://api.example.com/orders/{order_id}/refund",
                input_schema={
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}, "n": {"maximum": 1.5}},
                    "required": ["order_id"],
                },
                headers={"Accept": "application/json"},
                credential="payments-api-key",
                timeout_seconds=12.5,
            ),
        ),
        mcp_servers=(
            McpServer(
                name="crm",
                url="https://crm.test/mcp",
                transport="sse",
                allow=("contacts_*", "get_account"),
                oauth=McpOAuth(
                    grant="authorization_code",
                    preregistered_client_id="client-1",
                    redirect_uris=("https://b.test/cb", "https://a.test/cb"),
                ),
                optional=True,
                preload=False,
            ),
        ),
        skills=(
            Skill(name="refund-policy", description="When a refund is allowed", body="..."),
            Skill(name="tone", description="Voice", body="See [[skill:refund-policy]]."),
        ),
        subagents=(SubagentRef(name="child", description="Handles the small stuff.", spec=child),),
        spawn=SpawnEnvelope(tools=("lookup_order",), models=("gpt-4o-mini",), max_depth=2),
        compaction=CompactionPolicy(trigger_tokens=50_000, summary_instructions="Keep ids."),
        limits=Limits(max_steps=32, deadline_seconds=60.5),
        tasks_enabled=True,
        components_enabled=True,
        answer_style="concise",
    )


def rich_workflow() -> WorkflowSpec:
    return WorkflowSpec(
        name="onboard-customer",
        description="Onboarding",
        steps=(
            ToolStep(
                name="create",
                tool="create_account",
                arguments={"plan": "starter", "seats": 3, "ratio": 0.5, "tags": ["a", "b"]},
            ),
            AgentStep(name="welcome", spec=rich_agent()),
        ),
        tools=(CodeTool(name="create_account"),),
        limits=Limits(max_turns=5),
    )


def nested_workflow() -> WorkflowSpec:
    """Every nested union position: a step of each kind, a workflow in a workflow, an
    agent step with subagents and MCP OAuth, a suspension policy off its defaults."""
    agent = rich_agent().model_copy(
        update={"suspension": SuspensionPolicy(approval_expires_seconds=60.0)}
    )
    inner = WorkflowSpec(
        name="inner", steps=(AgentStep(name="ask", spec=agent),), tools=(CodeTool(name="t"),)
    )
    return rich_workflow().model_copy(
        update={"steps": (*rich_workflow().steps, WorkflowStepRef(name="nested", spec=inner))}
    )


@pytest.mark.parametrize(
    "spec", [minimal(), rich_agent(), rich_workflow(), nested_workflow()], ids=lambda s: s.name
)
def test_the_wire_form_keeps_every_kind_and_reads_back(spec: AgentSpec | WorkflowSpec) -> None:
    version = Version.of(spec, WHEN)
    data = version_wire_data(version)
    text = json.dumps(data)
    assert Version.model_validate_json(text) == version
    assert version_hash(parse_spec(data["spec"])) == version.hash
    assert text.count('"kind"') == json.dumps(spec_to_data(spec)).count('"kind"')
    # The short form, not the full dump it falls back to.
    assert len(json.dumps(data["spec"])) < len(json.dumps(spec_to_data(spec)))


# --- canonical bytes -----------------------------------------------------------------------


def _keys_sorted_everywhere(value: Any) -> bool:
    if isinstance(value, list):
        return all(_keys_sorted_everywhere(v) for v in value)
    if isinstance(value, dict):
        return all(_keys_sorted_everywhere(v) for v in value.values())
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # pairs
        keys = [k for k, _ in value]
        return keys == sorted(keys) and all(_keys_sorted_everywhere(v) for _, v in value)
    return True


@pytest.mark.parametrize("spec", [minimal(), rich_agent(), rich_workflow()], ids=["min", "a", "w"])
def test_canonical_bytes_sorted_and_compact(spec: AgentSpec | WorkflowSpec) -> None:
    raw = canonical_bytes(spec)
    pairs = json.loads(raw, object_pairs_hook=tuple)
    assert _keys_sorted_everywhere(pairs)
    data = json.loads(raw)
    assert raw == json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    assert b"\n" not in raw
    assert b'": ' not in raw
    assert b'", "' not in raw


def test_canonical_bytes_utf8_not_ascii_escaped() -> None:
    spec = AgentSpec(name="a", model=ModelRef(model="m"), description="café ☕ 日本")
    raw = canonical_bytes(spec)
    assert "café ☕ 日本".encode() in raw
    assert b"\\u" not in raw
    raw.decode("utf-8")


def test_canonical_bytes_materialise_every_field() -> None:
    data = json.loads(canonical_bytes(minimal()))
    assert set(data) == set(AgentSpec.model_fields)
    assert set(data["limits"]) == set(Limits.model_fields)
    assert set(data["model"]) == set(ModelRef.model_fields)
    assert data["spawn"] is None
    assert data["compaction"] is None
    assert data["answer_style"] is None
    assert data["limits"]["max_turns"] == 32
    assert b'"spawn":null' in canonical_bytes(minimal())


def test_explicit_defaults_hash_like_omitted_fields() -> None:
    explicit = AgentSpec(
        kind="agent",
        name="a",
        description="",
        instructions="",
        model=ModelRef(model="gpt-4o", temperature=None, fallbacks=()),
        tools=(),
        spawn=None,
        compaction=None,
        limits=Limits(max_turns=32, deadline_seconds=900),
        tasks_enabled=False,
        answer_style=None,
    )
    assert canonical_bytes(explicit) == canonical_bytes(minimal())
    assert version_hash(explicit) == version_hash(minimal())
    from_dict = parse_spec({"kind": "agent", "name": "a", "model": {"model": "gpt-4o"}})
    assert version_hash(from_dict) == version_hash(minimal())


def test_set_like_order_does_not_move_the_hash() -> None:
    a = AgentSpec(
        name="a", model=ModelRef(model="m"), tools=[CodeTool(name="x"), CodeTool(name="y")]
    )
    b = AgentSpec(
        name="a", model=ModelRef(model="m"), tools=[CodeTool(name="y"), CodeTool(name="x")]
    )
    assert version_hash(a) == version_hash(b)


def test_ordered_fields_move_the_hash() -> None:
    a = AgentSpec(name="a", model=ModelRef(model="m", fallbacks=["x", "y"]))
    b = AgentSpec(name="a", model=ModelRef(model="m", fallbacks=["y", "x"]))
    assert version_hash(a) != version_hash(b)


def test_nan_in_tool_step_arguments_refused() -> None:
    for bad in (float("nan"), float("inf"), float("-inf")):
        spec = WorkflowSpec(
            name="w",
            steps=[ToolStep(name="s", tool="t", arguments={"nested": {"xs": [1.0, bad]}})],
        )
        with pytest.raises(SpecError, match=r"steps\[0\]\.arguments\.nested\.xs\[1\]"):
            canonical_bytes(spec)
        with pytest.raises(SpecError):
            version_hash(spec)
        with pytest.raises(SpecError):
            Version.of(spec)


def test_nan_in_http_input_schema_refused() -> None:
    tool = HttpTool(
        name="h",
        description="d",
        url="https://x.test/",
        input_schema={"type": "object", "properties": {"n": {"maximum": float("inf")}}},
    )
    spec = AgentSpec(name="a", model=ModelRef(model="m"), tools=[tool])
    with pytest.raises(SpecError, match=r"tools\[0\]\.input_schema\.properties\.n\.maximum"):
        canonical_bytes(spec)


def test_nan_from_a_json_document_refused_at_hashing() -> None:
    text = json.dumps(
        {
            "kind": "workflow",
            "name": "w",
            "steps": [{"kind": "tool", "name": "s", "tool": "t", "arguments": {"x": "NAN"}}],
        }
    ).replace('"NAN"', "NaN")
    with pytest.raises(SpecError):
        version_hash(spec_from_json(text))


def test_canonical_bytes_do_not_depend_on_the_hash_seed() -> None:
    """A hash must be the same in every process (a worker re-hashes a pinned Version).

    Set iteration order depends on PYTHONHASHSEED, so a set inside ``arguments`` must
    either be refused or canonicalised; its iteration order must not reach the bytes.
    """
    program = (
        "from psych_runtime.specs import *\n"
        "try:\n"
        "    spec = WorkflowSpec(name='w', steps=[ToolStep(name='s', tool='t',"
        " arguments={'tags': {'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'}})])\n"
        "    print(canonical_bytes(spec).decode())\n"
        "except (SpecError, ValueError) as err:\n"
        "    print('refused', type(err).__name__)\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={"PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (0, 1, 2, 3)
    }
    shown = sorted(re.sub(r'.*"tags":(\[[^\]]*\]).*', r"\1", out.strip()) for out in outputs)
    assert len(outputs) == 1, f"bytes differ between hash seeds: {shown}"


# --- version hash --------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [minimal(), rich_agent(), rich_workflow()], ids=["min", "a", "w"])
def test_version_hash_format(spec: AgentSpec | WorkflowSpec) -> None:
    digest = version_hash(spec)
    assert HASH_RE.match(digest)
    assert digest == "sha256:" + hashlib.sha256(canonical_bytes(spec)).hexdigest()


def test_version_hash_sees_every_field() -> None:
    base = version_hash(rich_agent())
    data = spec_to_data(rich_agent())
    data["mcp_servers"][0]["oauth"]["client_name"] = "other"
    assert version_hash(parse_spec(data)) != base
    data = spec_to_data(rich_agent())
    data["subagents"][0]["spec"]["limits"]["max_turns"] = 31
    assert version_hash(parse_spec(data)) != base


# --- Version -------------------------------------------------------------------------------


def test_version_of_and_verify() -> None:
    spec = rich_agent()
    version = Version.of(spec, WHEN)
    assert version.hash == version_hash(spec)
    assert version.spec == spec
    assert version.published_at == WHEN
    assert version.verify() is version
    now = Version.of(spec)
    assert now.published_at.tzinfo is not None
    assert abs(now.published_at - datetime.now(UTC)) < timedelta(minutes=1)


def test_version_of_refuses_a_time_without_a_zone() -> None:
    # The stores refuse such a Version on read (it cannot be ordered among the others).
    with pytest.raises(SpecError, match="published_at '2026-01-02T03:04:05' has no time zone"):
        Version.of(minimal(), datetime(2026, 1, 2, 3, 4, 5))


def test_published_at_is_outside_the_hash() -> None:
    a = Version.of(minimal(), WHEN)
    b = Version.of(minimal(), WHEN + timedelta(days=400))
    assert a.hash == b.hash


def test_verify_refuses_a_tampered_hash() -> None:
    version = Version(hash="sha256:" + "0" * 64, spec=minimal(), published_at=WHEN)
    with pytest.raises(VersionMismatch, match="sha256:0000"):
        version.verify()
    other = Version.of(minimal(), WHEN).model_copy(update={"spec": rich_agent()})
    with pytest.raises(VersionMismatch):
        other.verify()


def test_version_hash_field_format_enforced() -> None:
    with pytest.raises(ValueError, match="hash"):
        Version(hash="md5:abc", spec=minimal(), published_at=WHEN)
    with pytest.raises(ValueError, match="hash"):
        Version(hash="sha256:" + "A" * 64, spec=minimal(), published_at=WHEN)


def test_version_is_frozen() -> None:
    version = Version.of(minimal(), WHEN)
    with pytest.raises(ValueError, match="frozen"):
        version.hash = "sha256:" + "1" * 64  # type: ignore[misc]


@pytest.mark.parametrize("spec", [minimal(), rich_agent(), rich_workflow()], ids=["min", "a", "w"])
def test_version_json_round_trip(spec: AgentSpec | WorkflowSpec) -> None:
    version = Version.of(spec, WHEN)
    text = version.to_json()
    back = Version.from_json(text)
    assert back == version
    assert back.hash == version.hash
    assert json.loads(text)["hash"] == version.hash
    assert Version.from_json(text.encode()) == version


@pytest.mark.parametrize("spec", [minimal(), rich_agent(), rich_workflow()], ids=["min", "a", "w"])
def test_version_yaml_round_trip(spec: AgentSpec | WorkflowSpec) -> None:
    version = Version.of(spec, WHEN)
    back = Version.from_yaml(version.to_yaml())
    assert back == version
    assert back.spec == spec
    assert version_hash(back.spec) == version.hash


@pytest.mark.parametrize("spec", [minimal(), rich_agent(), rich_workflow()], ids=["min", "a", "w"])
def test_spec_documents_round_trip(spec: AgentSpec | WorkflowSpec) -> None:
    assert spec_from_json(spec_to_json(spec)) == spec
    assert spec_from_yaml(spec_to_yaml(spec)) == spec
    assert version_hash(spec_from_yaml(spec_to_yaml(spec))) == version_hash(spec)
    assert json.loads(spec_to_json(spec)) == spec_to_data(spec)


@pytest.mark.parametrize("text", ["a\x85b", "line\x85", "\x85"], ids=["mid", "end", "alone"])
def test_yaml_round_trip_keeps_next_line_character(text: str) -> None:
    """U+0085 (NEL) is a line break to YAML; a plain dump folds it to a space on load.

    A description holding one (mis-decoded cp1252 "…" produces it) must survive export and
    import, or a published Version cannot be re-imported from its own YAML.
    """
    spec = AgentSpec(name="a", model=ModelRef(model="m"), description=text)
    assert spec_from_yaml(spec_to_yaml(spec)).description == text
    version = Version.of(spec, WHEN)
    assert Version.from_yaml(version.to_yaml()) == version


def test_document_with_wrong_hash_refused_json() -> None:
    version = Version.of(rich_agent(), WHEN)
    data = json.loads(version.to_json())
    data["spec"]["instructions"] = "Refund everything."
    with pytest.raises(VersionMismatch):
        Version.from_json(json.dumps(data))


def test_document_with_wrong_hash_refused_yaml() -> None:
    version = Version.of(rich_agent(), WHEN)
    data = yaml.safe_load(version.to_yaml())
    data["spec"]["limits"]["max_steps"] = 10000
    with pytest.raises(VersionMismatch):
        Version.from_yaml(yaml.safe_dump(data))
    data = yaml.safe_load(version.to_yaml())
    data["hash"] = "sha256:" + "f" * 64
    with pytest.raises(VersionMismatch):
        Version.from_yaml(yaml.safe_dump(data))


def test_document_published_at_does_not_affect_hash_check() -> None:
    data = Version.of(minimal(), WHEN).to_data()
    data["published_at"] = "2030-06-01T00:00:00+00:00"
    assert Version.from_data(data).published_at.year == 2030


def test_version_document_missing_parts() -> None:
    with pytest.raises(SpecError, match="published_at"):
        Version.from_data({"hash": version_hash(minimal()), "spec": spec_to_data(minimal())})
    with pytest.raises(SpecError, match="mapping"):
        Version.from_json("[1, 2]")
    with pytest.raises(SpecError, match=r"hash"):
        Version.from_data(
            {"hash": "nope", "spec": spec_to_data(minimal()), "published_at": WHEN.isoformat()}
        )


# --- malformed documents -------------------------------------------------------------------

BAD_YAML = "kind: agent\nname: a\nmodel:\n  model: gpt-4o\n   temperature: 0.2\n"


def test_malformed_yaml_is_a_spec_error_with_line_and_column() -> None:
    with pytest.raises(SpecError, match=r"invalid YAML at line 5, column \d+") as info:
        spec_from_yaml(BAD_YAML)
    assert type(info.value) is SpecError
    with pytest.raises(SpecError, match=r"line 3, column 4"):
        spec_from_yaml("kind: agent\nname: [a\n  b: {\n")
    with pytest.raises(SpecError, match=r"invalid YAML at line \d+, column \d+"):
        Version.from_yaml("hash: x\nspec: {kind: agent\n")


def test_malformed_json_is_a_spec_error_with_line_and_column() -> None:
    with pytest.raises(SpecError, match=r"invalid JSON at line 2, column \d+"):
        spec_from_json('{"kind": "agent",\n "name": }')
    with pytest.raises(SpecError, match=r"invalid JSON at line 1"):
        Version.from_json("{")


def test_yaml_that_is_not_a_mapping() -> None:
    with pytest.raises(SpecError, match="mapping"):
        spec_from_yaml("- just\n- a list\n")
    with pytest.raises(SpecError, match="mapping"):
        spec_from_yaml("")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (
            "kind: agent\nname: a\nmodel: {model: m}\nlimits:\n  max_turns: 0\n",
            "limits.max_turns",
        ),
        (
            "kind: agent\nname: a\nmodel: {model: m}\ntools:\n"
            "  - {kind: http, name: h, description: d, url: ''}\n",
            "tools[0].url",
        ),
        (
            "kind: agent\nname: a\nmodel: {model: m, temperature: 9}\n",
            "model.temperature",
        ),
        (
            "kind: workflow\nname: w\nsteps:\n  - {kind: tool, name: s, tool: '1bad'}\n",
            "steps[0].tool",
        ),
    ],
)
def test_yaml_with_bad_value_names_the_path(text: str, path: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_yaml(text, source="agent.yaml")
    message = str(info.value)
    assert message.startswith("agent.yaml")
    assert f"\n{path}: " in message


def test_version_document_with_bad_spec_names_the_path() -> None:
    data = Version.of(minimal(), WHEN).to_data()
    data["spec"]["limits"]["max_turns"] = 0
    with pytest.raises(SpecError, match=r"limits\.max_turns"):
        Version.from_yaml(yaml.safe_dump(data))
