"""A peer's ``input-required`` question as the Run's person reads it; an artifact the peer
marks ``cut_short`` as the model reads it."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types.a2a_pb2 import Artifact, Part, Task, TaskState, TaskStatus
from google.protobuf.struct_pb2 import Value

from psych_runtime.activities.a2a._answer import answer_of_task, question_text


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


# --- an artifact the peer marks cut_short ---------------------------------------------------


def _task(artifact: Artifact) -> Task:
    return Task(
        id="t1",
        status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED),
        artifacts=[artifact],
    )


def _answer(text: str, **metadata: Any) -> Artifact:
    artifact = Artifact(artifact_id="a1", name="answer", parts=[Part(text=text)])
    artifact.metadata.update(metadata)
    return artifact


async def _shown(artifact: Artifact, limit: int = 10_000) -> str:
    stored: list[bytes] = []

    async def store(data: bytes) -> str:
        stored.append(data)
        return "sha256:ref"

    answer = await answer_of_task(
        _task(artifact), peer="desk", tool="desk__x", large_result_bytes=limit, store=store
    )
    return answer.text


NOTE = '[runtime] Artifact "answer" was cut short'


async def test_a_cut_short_artifact_comes_after_the_note() -> None:
    shown = await _shown(_answer("Order 42 was shipped on", cut_short=True))
    assert f"{NOTE}: the peer's model stopped" in shown
    assert shown.index(NOTE) < shown.index('Artifact "answer":\nOrder 42 was shipped on')


async def test_a_stored_cut_short_artifact_has_the_note_before_its_handle() -> None:
    shown = await _shown(_answer("word " * 400, cut_short=True), limit=600)
    assert "stored under handle sha256:ref" in shown
    assert shown.index(NOTE) < shown.index('Artifact "answer" is 2000 bytes')


@pytest.mark.parametrize(
    "metadata",
    [{}, {"cut_short": False}, {"cut_short": "true"}, {"cut_short": 1}, {"other": True}],
)
async def test_only_cut_short_true_is_told(metadata: dict[str, Any]) -> None:
    # A peer that is not psych (no such metadata) or says anything but true: as before.
    shown = await _shown(_answer("All done.", **metadata))
    assert "[runtime]" not in shown
    assert shown.endswith('Artifact "answer":\nAll done.')
