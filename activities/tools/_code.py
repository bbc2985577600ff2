"""Code tools: a registered function called with validated arguments, its result as text."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from psych_runtime.specs import ToolDef


async def call_code(tool: ToolDef, parsed: BaseModel) -> Any:
    """Call ``tool.fn`` with validated arguments; sync functions run in a worker thread.

    ``ToolDef.invoke`` runs sync functions in the calling thread, and running it on a
    private event loop in a thread would break sync tools that start their own loop
    (``asyncio.run``), so the bound call is awaited here instead.
    """
    bound = tool.bind(parsed)
    result = await bound() if tool.is_async else await asyncio.to_thread(bound)
    if inspect.isawaitable(result):  # a callable object with an async __call__
        result = await result
    return result


def describe_invalid(err: ValidationError) -> str:
    """``order_id: Field required; limit: Input should be a valid integer``."""
    problems = []
    for error in err.errors(include_url=False):
        location = ".".join(str(part) for part in error["loc"])
        problems.append(f"{location}: {error['msg']}" if location else error["msg"])
    return "; ".join(problems)


def render_result(value: Any) -> str:
    """A tool's return value as the text the model reads."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str, ensure_ascii=False)
