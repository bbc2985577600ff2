"""An MCP ``tools/call`` result as the text of a tool result. Pure.

The model reads one text per tool call, so every content block becomes text: text blocks
as they are; images and audio as a line naming their type and size (the bytes would only
cost tokens the model cannot read as text); embedded text resources with their URI; binary
resources and resource links by URI. ``structuredContent`` is appended as JSON unless a
text block already carries the same value (servers built with the SDK send both).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _block_text(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        described = f": {block.description}" if block.description else ""
        return f"[resource link {block.uri} ({block.name}){described}]"
    resource = block.resource
    mime = f", {resource.mime_type}" if resource.mime_type else ""
    if isinstance(resource, mcp_types.TextResourceContents):
        return f"[resource {resource.uri}{mime}]\n{resource.text}"
    return f"[resource {resource.uri}{mime}, {_decoded_size(resource.blob)} bytes]"


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text the model is shown for ``result`` (``isError`` is the caller's to read)."""
    parts = [_block_text(block) for block in result.content]
    structured = result.structured_content
    texts = [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]
    repeated = any(_same_json(text, structured) for text in texts) or (
        len(texts) == 1 and structured == {"result": texts[0]}
    )
    if structured is not None and not repeated:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True, default=str))
    return "\n".join(parts)
