"""The model call the activity tests start from: one user message to the fake model."""

from __future__ import annotations

from typing import Any

from psych_runtime.activities.contract import ChatMessage, ModelCallInput
from psych_runtime.specs import ModelRef, Scope

MODEL = "fake-model"
HELLO = ChatMessage(role="user", content="Hello!")


def call(**fields: Any) -> ModelCallInput:
    """A first-turn call of run ``run-1`` saying ``HELLO``, with ``fields`` replaced."""
    values: dict[str, Any] = {
        "run_id": "run-1",
        "turn": 1,
        "model": MODEL,
        "params": ModelRef(model=MODEL),
        "new_messages": (HELLO,),
        "scope": Scope(tenant="acme"),
    }
    values.update(fields)
    return ModelCallInput(**values)
