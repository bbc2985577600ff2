"""The ApplicationError types that cross the workflow/activity/client line are API: their
values are what recorded histories and clients of other versions hold."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from psych_runtime.activities import MODEL_CALL_FAILED
from psych_runtime.activities.contract import ErrorType


def test_error_type_values_never_change() -> None:
    assert {member.name: member.value for member in ErrorType} == {
        "BAD_INPUT": "BadInput",
        "BLOB_NOT_FOUND": "BlobNotFound",
        "BLOB_SEAL_REFUSED": "BlobSealRefused",
        "COMPACTION_FAILED": "CompactionFailed",
        "DUPLICATE_TOOL_NAME": "DuplicateToolName",
        "LOCAL_CALL_HOOKED": "LocalCallHooked",
        "LOCAL_CALL_TIMED_OUT": "LocalCallTimedOut",
        "LOCAL_RESULT_TOO_LARGE": "LocalResultTooLarge",
        "LOCAL_STORE_FAILED": "LocalStoreFailed",
        "MCP_CONSENT_REQUIRED": "McpConsentRequired",
        "MCP_UNREACHABLE": "McpUnreachable",
        "MODEL_CALL_FAILED": "ModelCallFailed",
        "RESULT_NOT_KEPT": "ResultNotKept",
        "RUN_FAILED": "RunFailed",
        "TOOL_NOT_REGISTERED": "ToolNotRegistered",
    }
    assert MODEL_CALL_FAILED is ErrorType.MODEL_CALL_FAILED


def test_a_member_travels_as_its_plain_string() -> None:
    error = ApplicationError("boom", type=ErrorType.RUN_FAILED)
    assert error.type == "RunFailed"
    assert type(str(ErrorType.RUN_FAILED)) is str
    assert str(ErrorType.RUN_FAILED) == "RunFailed"
