"""A peer's ``input-required`` question as the Run's person reads it."""

from __future__ import annotations

from a2a.types.a2a_pb2 import Part
from google.protobuf.struct_pb2 import Value

from psych_runtime.activities.a2a._answer import question_text


def data(item: dict[str, str]) -> Part:
    value = Value()
    for key, text in item.items():
        value.struct_value.fields[key].string_value = text
    return Part(data=value)


def test_the_question_is_its_text_parts_without_the_data_beside_them() -> None:
    # psych serve's input-required message: the question, then the pending item as data.
    parts = [Part(text="Which day?"), data({"id": "q1", "reason": "question"})]
    assert question_text(parts) == "Which day?"


def test_several_text_parts_are_joined_in_order() -> None:
    parts = [Part(text="Which day?"), data({"id": "q1"}), Part(text="Mornings only.")]
    assert question_text(parts) == "Which day?\nMornings only."


def test_a_question_of_data_only_is_shown_as_its_json() -> None:
    assert question_text([data({"ask": "which day"})]) == '{"ask": "which day"}'


def test_no_parts_is_no_question_text() -> None:
    assert question_text([]) == ""
