"""Code tools: a registered function called with validated arguments, its result as text."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ValidationError

from psych_runtime.specs import ToolDef

SYNC_TOOL_THREADS = 256
"""Threads for sync code tools (made as calls need them): more than a worker runs tool calls
at once (``PSYCH_MAX_TOOL_CALLS`` activities and the SDK's 100 local activities, by
default), so an admitted call never waits for one. On the loop's default executor
(``min(32, CPUs + 4)`` threads) the calls past its size waited, and a local call's wait
counted toward its ``local_seconds``: a turn of parallel calls of a quick tool timed out
calls that had not started."""

_threads = ThreadPoolExecutor(max_workers=SYNC_TOOL_THREADS, thread_name_prefix="psych-tool")


async def call_code(tool: ToolDef, parsed: BaseModel) -> Any:
    """Call ``tool.fn`` with validated arguments; sync functions run on a thread of
    ``SYNC_TOOL_THREADS``, in the caller's context (``tool_scope()`` reads it).

    ``ToolDef.invoke`` runs sync functions in the calling thread, and running it on a
    private event loop in a thread would break sync tools that start their own loop
    (``asyncio.run``), so the bound call is awaited here instead.
    """
    bound = tool.bind(parsed)
    if tool.is_async:
        result = await bound()
    else:
        context = contextvars.copy_context()
        result = await asyncio.get_running_loop().run_in_executor(_threads, context.run, bound)
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
