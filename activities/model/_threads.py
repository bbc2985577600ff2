"""Threads: the earlier conversation a continuing Run's model sees, by reference.

A Run that continues an earlier one (``RunInput.thread``) sends, with its first model
call only, the earlier conversation's head and its bound (``ThreadContext``). The model
activity stores one node holding the refs of the earlier conversation's last messages
(their blobs are shared, never copied through history) and appends the Run's own first
node to it, so every later call of the Run sees the same prefix through its head.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from psych_runtime.activities.blobs import BlobStore, Conversations
from psych_runtime.activities.contract import ChatMessage, ThreadContext


async def chain_nodes(blobs: BlobStore, head: str | None) -> list[tuple[str, list[str]]]:
    """The nodes of the chain ending at ``head``, root first: ``(node ref, message refs)``."""
    nodes: list[tuple[str, list[str]]] = []
    cursor = head
    while cursor is not None:
        node = json.loads(await blobs.get(cursor))
        nodes.append((cursor, list(node["messages"])))
        cursor = node["parent"]
    nodes.reverse()
    return nodes


def bounded(messages: Sequence[ChatMessage], limit: int) -> tuple[int, int]:
    """``(start, end)`` of the last ``limit`` messages a continuing Run may be shown.

    The end stops before an assistant message whose tool calls are not all answered right
    after it (an earlier Run that stopped mid-turn), and the start moves past tool results
    whose call the bound cut off: a model is never shown a call without its result or a
    result without its call. So the slice may be shorter than ``limit``; 0 shows nothing.
    """
    end = len(messages)
    for index, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_calls:
            continue
        answered: set[str | None] = set()
        for later in messages[index + 1 :]:
            if later.role != "tool":
                break
            answered.add(later.tool_call_id)
        if any(call.id not in answered for call in message.tool_calls):
            end = index
            break
    start = max(0, end - limit)
    while start < end and messages[start].role == "tool":
        start += 1
    return start, end


async def thread_head(conversations: Conversations, thread: ThreadContext) -> str | None:
    """A node holding the bounded earlier conversation by reference; None when the bound
    leaves nothing of it."""
    nodes = await chain_nodes(conversations.blobs, thread.head)
    refs = [ref for _, messages in nodes for ref in messages]
    start, end = bounded(await conversations.messages(thread.head), thread.max_messages)
    if start == end:
        return None
    return await conversations.append(None, refs[start:end])
