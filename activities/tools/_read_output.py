"""The built-in ``read_tool_output``: a slice of a stored large result."""

from __future__ import annotations

from temporalio import activity

from psych_runtime.activities.blobs import BlobSealRefused, BlobStore
from psych_runtime.activities.contract import ReadOutputInput, is_blob_ref
from psych_runtime.activities.tools._http import ToolError
from psych_runtime.specs import NotFound


async def read_slice(blobs: BlobStore, input: ReadOutputInput) -> str:
    """The slice ``input`` asks for of a stored result, after a header line with the total
    size and the next offset.

    Raises:
        ToolError: no such handle, a damaged stored output, one whose seal does not open
            with the worker's keys, or an offset past the end.
    """
    handle = input.handle
    missing = ToolError(f"no stored tool output with handle {handle!r}")
    if not is_blob_ref(handle):
        raise missing
    try:
        data = await blobs.get(handle)
    except BlobSealRefused as err:
        # The model is told which output and that it does not open here; the cipher's own
        # words (key ids, the tenants keys are for) are the operator's, in the worker's log.
        activity.logger.warning("read_tool_output: %s (%s)", err.message, err.__cause__)
        raise ToolError(
            f"the stored tool output {handle} does not open with this worker's keys (it was "
            "sealed under keys this worker does not hold, or altered) and cannot be read"
        ) from err
    except NotFound as err:
        # BlobNotFound.damaged, said without the store's message: the model reads this,
        # and a store's path or bucket is the operator's.
        if getattr(err, "damaged", False):
            raise ToolError(
                f"the stored tool output {handle} is damaged (its bytes no longer hash to its "
                "handle) and cannot be read; call the tool that produced it again"
            ) from err
        raise missing from err
    text = data.decode("utf-8", errors="replace")
    total = len(text)
    if input.offset < 0 or input.length < 1:
        raise ToolError("read_tool_output: offset must be >= 0 and length >= 1")
    if input.offset > total:
        raise ToolError(
            f"read_tool_output: offset {input.offset} is past the end of {handle} "
            f"({total} characters)"
        )
    end = min(input.offset + input.length, total)
    after = f"next offset {end}" if end < total else "end of output"
    header = f"[{handle}: characters {input.offset}-{end} of {total} ({len(data)} bytes); {after}]"
    return f"{header}\n{text[input.offset : end]}"
