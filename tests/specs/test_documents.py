"""Hostile Spec documents end in a SpecError naming the place, in bounded time.

Each case here ended in a foreign exception, a silent wrong value or minutes of CPU before
the documents loader bounded them (issue 8, item 2).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from psych_runtime.activities import FileVersionStore
from psych_runtime.specs import (
    MAX_DOCUMENT_BYTES,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    AgentSpec,
    HttpTool,
    ModelRef,
    SpecError,
    Version,
    WorkflowSpec,
    canonical_bytes,
    parse_spec,
    spec_from_json,
    spec_from_yaml,
    spec_to_json,
    spec_to_yaml,
    validate,
)

Loader = Callable[..., AgentSpec | WorkflowSpec]
HEAD_YAML = "kind: agent\nname: a\nmodel: {model: m}\n"
HEAD_JSON = '{"kind": "agent", "name": "a", "model": {"model": "m"}'

# The classic "billion laughs": nine levels of nine aliases, 9**9 strings when expanded.
BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
)


def refused(load: Loader, document: str | bytes, *, within: float = 2.0) -> str:
    """The SpecError message ``load`` ends in, asserting nothing else escapes and it is
    quick (in CPU seconds, so a busy machine does not make it flaky)."""
    started = time.process_time()
    with pytest.raises(SpecError) as caught:
        load(document, source="doc.spec")
    elapsed = time.process_time() - started
    assert elapsed < within, f"took {elapsed:.2f}s"
    message = str(caught.value)
    assert message.startswith("doc.spec")
    return message


def http_tool_yaml(schema: str) -> str:
    return (
        HEAD_YAML
        + "tools:\n  - kind: http\n    name: t\n    description: d\n    url: https://x.test\n"
        + f"    input_schema: {schema}\n"
    )


@pytest.mark.parametrize("load", [spec_from_json, spec_from_yaml])
def test_bytes_that_are_not_utf8_name_line_and_column(load: Loader) -> None:
    document = b'{"kind": "agent",\n "name": "caf\xe9", "model": {"model": "m"}}'
    message = refused(load, document)
    assert "not UTF-8 at line 2, column 14 (byte 0xe9)" in message


@pytest.mark.parametrize(
    ("load", "document", "where"),
    [
        (spec_from_json, "[" * 100_000, "line 1, column 129"),
        (spec_from_json, '{"a":' * 100_000, "line 1, column 641"),
        (spec_from_yaml, "[" * 100_000, "line 1, column 129"),
        (spec_from_yaml, "{a: " * 100_000, "line 1, column 513"),
        (spec_from_yaml, "- " * 100_000, "line 1, column 257"),
        (spec_from_yaml, "".join("  " * i + "a:\n" for i in range(400)), "line 129, column 257"),
    ],
    ids=["json-lists", "json-maps", "yaml-flow-lists", "yaml-flow-maps", "yaml-seq", "yaml-map"],
)
def test_deep_nesting_is_refused_at_its_position(load: Loader, document: str, where: str) -> None:
    message = refused(load, document, within=1.0)
    assert where in message
    assert f"nested deeper than {MAX_SPEC_DEPTH} levels" in message


def test_nesting_at_the_bound_loads_and_one_more_is_refused_by_path() -> None:
    def schema(depth: int) -> dict[str, Any]:
        inner: dict[str, Any] = {}
        for _ in range(depth):
            inner = {"p": inner}
        return inner

    # tools[0].input_schema is at level 4 (root, tools list, tool, input_schema).
    ok = json.loads(HEAD_JSON + "}")
    ok["tools"] = [{"kind": "http", "name": "t", "description": "d", "url": "https://x.test"}]
    ok["tools"][0]["input_schema"] = schema(MAX_SPEC_DEPTH - 4)
    spec = spec_from_json(json.dumps(ok))
    assert validate(spec) == []
    assert spec_from_yaml(spec_to_yaml(spec)) == spec
    ok["tools"][0]["input_schema"] = schema(MAX_SPEC_DEPTH - 3)
    message = refused(spec_from_json, json.dumps(ok))
    assert "nested deeper than 128 levels" in message
    with pytest.raises(SpecError, match=r"tools\[0\]\.input_schema(\.p)+: nested deeper"):
        parse_spec(ok)


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ("&a [*a]", "[0]"),
        ("&a {x: *a}", "x"),
        (http_tool_yaml("&s {properties: {p: *s}}"), "tools[0].input_schema.properties.p"),
    ],
)
def test_recursive_yaml_alias_is_refused_with_its_path(document: str, path: str) -> None:
    message = refused(spec_from_yaml, document)
    assert f"doc.spec: {path}: contains itself" in message


def test_yaml_alias_bomb_is_refused_within_a_second() -> None:
    body = "".join("      " + line + "\n" for line in BILLION_LAUGHS.splitlines())
    document = http_tool_yaml("\n" + body)
    assert len(BILLION_LAUGHS) < 529 < len(document) < 800
    message = refused(spec_from_yaml, document, within=1.0)
    assert "tools[0].input_schema" in message
    assert "expands to more than" in message


def test_aliases_that_stay_small_still_load() -> None:
    document = http_tool_yaml("&s {type: object, properties: {}}") + (
        "  - kind: http\n    name: u\n    description: d\n    url: https://x.test\n"
        "    input_schema: *s\n"
    )
    spec = spec_from_yaml(document)
    assert isinstance(spec, AgentSpec)
    schemas = [t.input_schema for t in spec.tools if isinstance(t, HttpTool)]
    assert schemas == [{"type": "object", "properties": {}}] * 2


@pytest.mark.parametrize(
    ("load", "document", "where"),
    [
        (spec_from_json, HEAD_JSON[:-1] + ', "max_output_tokens": ' + "9" * 5000 + "}}", "column"),
        (spec_from_yaml, HEAD_YAML[:-2] + ", max_output_tokens: " + "9" * 5000 + "}\n", "line 3"),
        (spec_from_yaml, HEAD_YAML + "x: !!int 0x" + "f" * 5000 + "\n", "line 4, column 4"),
    ],
    ids=["json", "yaml", "yaml-hex"],
)
def test_integer_of_thousands_of_digits_is_refused(load: Loader, document: str, where: str) -> None:
    message = refused(load, document)
    assert where in message and "digits" in message


def test_integer_within_python_limit_but_over_the_bound_is_refused_by_path() -> None:
    data = {"kind": "agent", "name": "a", "model": {"model": "m", "max_output_tokens": 10**1500}}
    with pytest.raises(SpecError, match=r"model\.max_output_tokens: an integer of more than"):
        parse_spec(data)


@pytest.mark.parametrize(
    ("load", "document"),
    [
        (spec_from_json, HEAD_JSON + ', "instructions": "hi \\ud800"}'),
        (spec_from_yaml, HEAD_YAML + 'instructions: "hi \\ud800"\n'),
        (spec_from_yaml, HEAD_YAML + 'instructions: "\\ud83d\\ude00"\n'),  # a pair, YAML-escaped
    ],
    ids=["json", "yaml", "yaml-pair"],
)
def test_lone_surrogate_is_refused_at_load_with_its_path(load: Loader, document: str) -> None:
    message = refused(load, document)
    assert "doc.spec: instructions: contains a lone surrogate U+D8" in message


def test_lone_surrogate_in_a_built_spec_is_a_validation_problem_not_a_crash(
    tmp_path: Path,
) -> None:
    tool = HttpTool(
        name="t", description="d", url="https://x.test", headers={"X-Note": "caf\udce9"}
    )
    spec = AgentSpec(name="a", model=ModelRef(model="m"), tools=[tool])
    problems = validate(spec)
    # Also a value no request can carry (specs/_headers.py), said by the header's path.
    assert [p.path for p in problems] == ["tools[t].headers[X-Note]", "tools[0].headers.X-Note"]
    assert "non-ASCII" in problems[0].message
    assert "lone surrogate U+DCE9" in problems[1].message
    with pytest.raises(SpecError, match=r"tools\[0\]\.headers\.X-Note: contains a lone"):
        FileVersionStore(tmp_path).publish(spec)


DUPLICATE_IN_TOOL = ', "tools": [{"kind": "code", "name": "x", "n\\u0061me": "y"}]}'


@pytest.mark.parametrize(
    ("load", "document", "where", "key"),
    [
        (
            spec_from_json,
            '{"kind": "agent", "name": "a",\n "name": "b"}',
            "line 2, column 2",
            "name",
        ),
        (spec_from_json, HEAD_JSON + DUPLICATE_IN_TOOL, "line 1, column 97", "name"),
        (spec_from_yaml, HEAD_YAML + "name: b\n", "line 4, column 1", "name"),
        (spec_from_yaml, HEAD_YAML.replace("m}", "m, model: n}"), "line 3", "model"),
    ],
    ids=["json", "json-escaped", "yaml", "yaml-flow"],
)
def test_duplicate_keys_are_refused_naming_key_and_line(
    load: Loader, document: str, where: str, key: str
) -> None:
    message = refused(load, document)
    assert where in message
    assert f"duplicate key {key!r}" in message


def test_yaml_merge_keys_may_still_be_overridden() -> None:
    document = (
        "kind: agent\nname: a\nbase: &base {model: m, temperature: 0.5}\n"
        "model: {<<: *base, temperature: 0.2}\n"
    )
    message = refused(spec_from_yaml, document)  # `base` is not a field; the merge is fine
    assert "base: Extra inputs are not permitted" in message
    spec = spec_from_yaml(
        "kind: agent\nname: a\nmodel: {<<: {model: m, temperature: 0.5}, temperature: 0.2}\n"
    )
    assert isinstance(spec, AgentSpec) and spec.model.temperature == 0.2


@pytest.mark.parametrize(
    "document",
    [
        HEAD_YAML + "description: 2001-13-45\n",  # a timestamp PyYAML cannot build
        HEAD_YAML + "description: !!python/object:os.system x\n",
        HEAD_YAML + "description: \x00\n",
        HEAD_YAML + "x: *undefined\n",
        "? [a]\n: b\n",
    ],
    ids=["timestamp", "python-tag", "nul", "undefined-alias", "unhashable-key"],
)
def test_what_pyyaml_itself_refuses_is_a_spec_error_with_position(document: str) -> None:
    assert "line " in refused(spec_from_yaml, document)


def test_cyclic_data_from_code_is_refused_by_parse_spec() -> None:
    schema: dict[str, Any] = {"type": "object"}
    schema["properties"] = {"self": schema}
    tool = {
        "kind": "http",
        "name": "t",
        "description": "d",
        "url": "https://x",
        "input_schema": schema,
    }
    data = {"kind": "agent", "name": "a", "model": {"model": "m"}, "tools": [tool]}
    with pytest.raises(SpecError, match=r"tools\[0\]\.input_schema\.properties\.self: contains"):
        parse_spec(data)


@pytest.mark.parametrize("load", [spec_from_json, spec_from_yaml])
def test_a_document_larger_than_the_bound_is_refused_before_parsing(load: Loader) -> None:
    document = b" " * (MAX_DOCUMENT_BYTES + 1)
    message = refused(load, document, within=0.5)
    assert f"more than a Spec document may hold ({MAX_DOCUMENT_BYTES} bytes)" in message


def test_a_spec_over_the_size_bound_is_a_validation_problem_naming_both_sizes() -> None:
    base = AgentSpec(name="a", model=ModelRef(model="m"))
    room = MAX_SPEC_BYTES - len(canonical_bytes(base))
    at_bound = base.model_copy(update={"instructions": "x" * room})
    assert len(canonical_bytes(at_bound)) == MAX_SPEC_BYTES
    assert validate(at_bound) == []
    over = base.model_copy(update={"instructions": "x" * (room + 1)})
    (problem,) = validate(over)
    assert problem.path == "<root>"
    assert f"{MAX_SPEC_BYTES + 1} bytes" in problem.message
    assert f"at most {MAX_SPEC_BYTES}" in problem.message


def test_a_version_at_the_depth_bound_round_trips_through_the_store(tmp_path: Path) -> None:
    inner: dict[str, Any] = {}
    for _ in range(MAX_SPEC_DEPTH - 4):
        inner = {"p": inner}
    tool = HttpTool(name="t", description="d", url="https://x.test", input_schema=inner)
    spec = AgentSpec(name="a", model=ModelRef(model="m"), tools=[tool])
    assert validate(spec) == []
    store = FileVersionStore(tmp_path)
    version = store.publish(spec)
    assert store.get(version.hash) == version
    assert Version.from_yaml(version.to_yaml()) == version
    assert spec_from_json(spec_to_json(spec)) == spec


def test_a_damaged_version_file_is_a_spec_error(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path)
    version = store.publish(AgentSpec(name="a", model=ModelRef(model="m")))
    path = tmp_path / f"{version.hash.removeprefix('sha256:')}.json"
    path.write_bytes(path.read_bytes().replace(b'"a"', b'"\xff"'))
    with pytest.raises(SpecError, match="not UTF-8 at line"):
        store.get(version.hash)


def test_free_form_json_built_in_code_is_bounded_too() -> None:
    cyclic: dict[str, Any] = {"type": "object"}
    cyclic["properties"] = cyclic
    with pytest.raises(ValidationError, match=r"properties: contains itself"):
        HttpTool(name="t", description="d", url="https://x.test", input_schema=cyclic)
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"p": deep}
    with pytest.raises(ValidationError, match=r"nested deeper than 128 levels"):
        HttpTool(name="t", description="d", url="https://x.test", input_schema=deep)
