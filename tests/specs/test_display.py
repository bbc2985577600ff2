"""The task list and display-component schemas and their bounds (specs/_display.py)."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest

from psych_runtime.specs import (
    COMPONENT_KINDS,
    COMPONENT_SCHEMA,
    MAX_ITEMS,
    MAX_TASKS,
    AnyComponent,
    Card,
    Task,
    parse_component,
    parse_tasks,
)


def test_a_valid_task_list_parses_with_pending_by_default() -> None:
    assert parse_tasks({"tasks": [{"title": "a"}, {"title": "b", "status": "completed"}]}) == (
        Task(title="a", status="pending"),
        Task(title="b", status="completed"),
    )
    assert parse_tasks({"tasks": []}) == ()


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({}, "tasks: Field required"),
        ({"tasks": [{"title": ""}]}, "tasks.0.title: String should have at least 1 character"),
        ({"tasks": [{"title": "t" * 201}]}, "at most 200 characters"),
        ({"tasks": [{"title": "t"}] * (MAX_TASKS + 1)}, "at most 50 items"),
        ({"tasks": [{"title": "t", "status": "done"}]}, "tasks.0.status"),
        ({"tasks": [{"title": "t", "owner": "me"}]}, "tasks.0.owner: Extra inputs"),
    ],
)
def test_invalid_task_lists_are_refused_with_the_reason(
    arguments: dict[str, Any], reason: str
) -> None:
    refused = parse_tasks(arguments)
    assert isinstance(refused, str) and refused.startswith("task list refused: ")
    assert reason in refused


@pytest.mark.parametrize(
    ("component", "reason"),
    [
        ({"kind": "card", "title": "x", "link": "javascript:alert(1)"}, "links must be http(s)"),
        ({"kind": "card", "title": "x", "image": "file:///etc/passwd"}, "links must be http(s)"),
        ({"kind": "card", "title": "x", "link": "https://"}, "with a host"),
        ({"kind": "card", "title": "x", "body": "b" * 2001}, "at most 2000 characters"),
        ({"kind": "carousel", "cards": []}, "at least 1 item"),
        ({"kind": "carousel", "cards": [{"title": "c"}] * (MAX_ITEMS + 1)}, "at most 20 items"),
        ({"kind": "detail", "title": "d", "fields": [{"label": "l"}]}, "value: Field required"),
        (
            {
                "kind": "chart",
                "title": "c",
                "labels": ["a", "b"],
                "series": [{"name": "s", "values": [1]}],
            },
            "has 1 values for 2 labels",
        ),
        ({"kind": "metric", "label": "l", "value": ""}, "at least 1 character"),
        ({"kind": "video", "title": "v"}, "'video'"),
    ],
)
def test_invalid_components_are_refused_with_the_reason(
    component: dict[str, Any], reason: str
) -> None:
    refused = parse_component({"component": component})
    assert isinstance(refused, str) and refused.startswith("component refused: ")
    assert reason in refused


def test_a_valid_card_parses() -> None:
    card = parse_component({"component": {"kind": "card", "title": "t", "link": "http://a.b"}})
    assert card == Card(title="t", link="http://a.b")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_chart_value_that_is_not_finite_is_refused(value: str) -> None:
    # The model's arguments are decoded with json.loads, which accepts all four; recorded,
    # they would be written as null and the Run's records would no longer decode.
    arguments = json.loads(
        '{"component": {"kind": "chart", "title": "t", "labels": ["a"], '
        f'"series": [{{"name": "s", "values": [{value}]}}]}}}}'
    )
    reason = parse_component(arguments)
    assert isinstance(reason, str)
    assert "component.chart.series.0.values.0: Input should be a finite number" in reason


def test_the_schema_requires_kind_as_the_validator_does() -> None:
    kinds = {
        name: definition
        for name, definition in COMPONENT_SCHEMA["$defs"].items()
        if "kind" in definition["properties"]
    }
    assert len(kinds) == len(COMPONENT_KINDS)
    for name, definition in kinds.items():
        assert "kind" in definition["required"], name
        assert "default" not in definition["properties"]["kind"], name
    # And the validator: the same card without its kind is refused.
    assert isinstance(parse_component({"component": {"kind": "card", "title": "t"}}), Card)
    refused = parse_component({"component": {"title": "t"}})
    assert isinstance(refused, str)
    assert "component: Unable to extract tag using discriminator 'kind'" in refused


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"tasks": [{"title": "ok \x1b[2J"}]}, "tasks.0.title"),
        ({"tasks": [{"title": "two\nlines"}]}, "tasks.0.title"),
    ],
)
def test_a_task_title_with_a_control_character_is_refused(
    arguments: dict[str, Any], where: str
) -> None:
    reason = parse_tasks(arguments)
    assert isinstance(reason, str)
    assert f"{where}: Value error, control character U+00" in reason
    assert "it would act on the terminal that prints it" in reason


@pytest.mark.parametrize(
    ("component", "where", "char"),
    [
        ({"kind": "card", "title": "\x1b[31mred"}, "component.card.title", "U+001B"),
        # OSC 8: a hyperlink whose shown text hides its target.
        (
            {"kind": "card", "title": "t", "body": "\x1b]8;;https://evil.test\x1b\\click"},
            "component.card.body",
            "U+001B",
        ),
        ({"kind": "metric", "label": "l", "value": "1\x9b2J"}, "component.metric.value", "U+009B"),
        ({"kind": "card", "title": "t", "body": "a\rb"}, "component.card.body", "U+000D"),
        (
            {"kind": "card", "title": "t", "link": "https://x.test/\x07"},
            "component.card.link",
            "U+0007",
        ),
    ],
)
def test_component_strings_with_control_characters_are_refused(
    component: dict[str, Any], where: str, char: str
) -> None:
    reason = parse_component({"component": component})
    assert isinstance(reason, str)
    assert f"{where}: Value error, control character {char}" in reason


def test_newline_and_tab_are_kept_in_long_text_only() -> None:
    card = parse_component({"component": {"kind": "card", "title": "t", "body": "a\n\tb"}})
    assert isinstance(card, Card)
    assert card.body == "a\n\tb"
    refused = parse_component({"component": {"kind": "card", "title": "a\tb"}})
    assert isinstance(refused, str)
    assert "only newline and tab are" not in refused  # a title allows none


def test_the_component_kinds_are_read_from_the_union() -> None:
    assert COMPONENT_KINDS == ("card", "carousel", "detail", "timeline", "chart", "metric")
    assert [kind.model_fields["kind"].default for kind in get_args(AnyComponent)] == list(
        COMPONENT_KINDS
    )
