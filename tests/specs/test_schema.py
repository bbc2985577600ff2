"""The JSON Schema of Spec files: the kept file equals the models' schema, and it accepts
every example Spec and what the models write, and refuses what they refuse."""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from psych_runtime.specs import (
    SCHEMA_FILE,
    SpecError,
    parse_spec,
    spec_json_schema,
    spec_json_schema_text,
    spec_to_data,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

# A Spec that sets something in most of the models: tools of both kinds, an MCP server,
# an A2A peer, a subagent with its own Spec, limits, suspensions and skills.
RICH_AGENT: dict[str, Any] = {
    "kind": "agent",
    "name": "rich",
    "instructions": "Do the thing.",
    "model": {"model": "gpt-4o-mini", "temperature": 0.5, "fallbacks": ["other"]},
    "tools": [
        {"kind": "code", "name": "lookup"},
        {
            "kind": "http",
            "name": "refund",
            "description": "Refund an order.",
            "url": "https://payments.example/orders/{order_id}",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    ],
    "mcp_servers": [{"name": "docs", "url": "https://mcp.example/mcp", "allow": ["search"]}],
    "limits": {"max_turns": 4, "max_steps": 7},
    "skills": [{"name": "policy", "description": "The refund policy.", "body": "Be kind."}],
    "subagents": [
        {
            "name": "researcher",
            "description": "Looks things up when the answer needs research.",
            "spec": {"name": "researcher", "instructions": "Research.", "model": {"model": "m"}},
        }
    ],
}


def _messages(errors: Iterable[jsonschema.ValidationError]) -> list[str]:
    """Every error's message, those of the branches of a oneOf/anyOf included."""
    return [m for error in errors for m in [error.message, *_messages(error.context or ())]]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / "specs" / SCHEMA_FILE).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_kept_schema_file_is_the_models_schema() -> None:
    kept = (ROOT / "specs" / SCHEMA_FILE).read_text(encoding="utf-8")
    assert kept == spec_json_schema_text(), "run: psych schema -o specs/" + SCHEMA_FILE
    assert json.loads(kept) == spec_json_schema()
    shipped = resources.files("psych_runtime.specs").joinpath(SCHEMA_FILE)
    assert shipped.read_text(encoding="utf-8") == kept  # package data


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_spec_is_valid_and_names_the_schema(
    path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"# yaml-language-server: $schema=../specs/{SCHEMA_FILE}\n")
    data = yaml.safe_load(text)
    validator.validate(data)
    parse_spec(data)  # and the models agree


def test_there_are_example_specs() -> None:
    assert len(EXAMPLES) >= 2


def test_what_the_models_write_is_valid(validator: jsonschema.Draft202012Validator) -> None:
    spec = parse_spec(RICH_AGENT)
    validator.validate(RICH_AGENT)
    validator.validate(spec_to_data(spec))  # every field present, defaults included


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"kind": None}, "'kind' is a required property"),
        ({"colour": "blue"}, "Additional properties are not allowed"),
        ({"limits": {"max_turns": 0}}, "less than or equal to the minimum"),
        ({"limits": {"max_turns": 5000}}, "is greater than the maximum"),
        ({"model": {"model": "m", "temperature": "hot"}}, "is not of type 'number'"),
    ],
)
def test_what_the_models_refuse_the_schema_refuses(
    change: dict[str, Any], why: str, validator: jsonschema.Draft202012Validator
) -> None:
    data = {**RICH_AGENT, **change}
    data = {key: value for key, value in data.items() if value is not None}
    with pytest.raises(SpecError):
        parse_spec(data)
    errors = _messages(validator.iter_errors(data))
    assert any(why in message for message in errors), errors
