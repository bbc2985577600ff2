"""Texts the workflow builds from activity-side helpers."""

from __future__ import annotations

import json

import pytest

from psych_runtime.activities import invalid_arguments_message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            '{"order_id": "42',
            "arguments are not valid JSON: Unterminated string starting (at character 13); resend",
        ),
        (
            '{"order_id": ',
            "arguments are not valid JSON: Expecting value (at character 13); resend",
        ),
        (
            "{'a': 1}",
            "arguments are not valid JSON: Expecting property name enclosed in double "
            "quotes (at character 1); resend",
        ),
    ],
)
def test_invalid_arguments_message_says_at_once(raw: str, expected: str) -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(raw)
    message = invalid_arguments_message(caught.value)
    assert message == expected
    assert "at at" not in message
