"""An MCP tools/call result as tool-result text: a pure function over the SDK's types.

The blocks the test server cannot send (audio, resource links, binary resources) are
built here; text, image, embedded text resource and structured content are also checked
end to end in test_mcp.py.
"""

from __future__ import annotations

import base64
import json

import mcp_types

from psych_runtime.activities.mcp._results import result_text


def test_text_blocks_are_joined_by_lines() -> None:
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="one"), mcp_types.TextContent(text="two")]
    )
    assert result_text(result) == "one\ntwo"


def test_binary_blocks_are_named_with_their_size_not_their_bytes() -> None:
    data = base64.b64encode(b"x" * 300).decode()
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.AudioContent(data=data, mime_type="audio/wav"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.BlobResourceContents(
                    uri="file:///report.pdf", mime_type="application/pdf", blob=data
                )
            ),
            mcp_types.ResourceLink(
                uri="file:///notes.txt", name="notes", description="meeting notes"
            ),
        ]
    )
    assert result_text(result).splitlines() == [
        "[audio audio/wav, 300 bytes]",
        "[resource file:///report.pdf, application/pdf, 300 bytes]",
        "[resource link file:///notes.txt (notes): meeting notes]",
    ]


def test_structured_content_is_added_as_json_unless_the_text_already_says_it() -> None:
    value = {"id": "7", "tags": ["a", "b"]}
    only_structured = mcp_types.CallToolResult(content=[], structured_content=value)
    assert json.loads(result_text(only_structured)) == value

    different = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="Found record 7.")], structured_content=value
    )
    assert result_text(different).splitlines()[0] == "Found record 7."
    assert json.loads(result_text(different).splitlines()[1]) == value

    # What SDK-built servers send: the value's JSON as text, or a plain value wrapped.
    as_json = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=json.dumps(value, indent=2))],
        structured_content=value,
    )
    assert json.loads(result_text(as_json)) == value
    wrapped = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text="done 3")], structured_content={"result": "done 3"}
    )
    assert result_text(wrapped) == "done 3"
