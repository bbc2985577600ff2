"""psych_runtime.activities: every side effect of a Run, and the ports they go through.

Model calls over httpx, code and HTTP tools, MCP servers, policy, blobs, secrets, versions,
pricing.
Workflows import only the payload types. The scriptable fake model server for tests is
``psych_runtime.testing`` (its files live in ``activities/testing/``).
"""

from typing import TYPE_CHECKING, Any

from psych_runtime.activities._blob_config import blob_store_from_env
from psych_runtime.activities._blobs import (
    BlobCipher,
    BlobNotFound,
    BlobStore,
    Conversations,
    EncryptedBlobStore,
    LocalBlobStore,
    blob_ref,
)
from psych_runtime.activities._command_hooks import CommandHook
from psych_runtime.activities._compaction import SUMMARISER_PROMPT, CompactionActivities
from psych_runtime.activities._context import (
    ContextProvider,
    ContextProviders,
    ContextRequest,
    ContextSettings,
    ContextSource,
    estimate_tokens,
)
from psych_runtime.activities._context_result import ContextShown, ContextSkipped, ContextTurn
from psych_runtime.activities._endpoints import (
    Endpoint,
    ModelEndpoints,
    ModelPrice,
    Pricing,
    TablePricing,
)
from psych_runtime.activities._hooks import Deny, Hook, HookCall, Hooks
from psych_runtime.activities._mcp_settings import McpSettings
from psych_runtime.activities._model import MODEL_CALL_FAILED, ModelActivities
from psych_runtime.activities._model_failures import classify
from psych_runtime.activities._payloads import (
    ACTIVITY_NAMES,
    ACTIVITY_ROLES,
    ROLES,
    ChatMessage,
    Decision,
    HookEffect,
    Latency,
    ModelCallInput,
    ModelCallResult,
    ModelFailure,
    PolicyDecision,
    ToolCallRequest,
    ToolDefinition,
    ToolInfo,
    ToolOutcome,
    Usage,
    invalid_arguments_message,
    role_task_queue,
)
from psych_runtime.activities._policy import (
    Policy,
    RulePolicy,
    policy_description,
    policy_digest,
)
from psych_runtime.activities._s3_blobs import S3BlobStore, S3Location, parse_s3_url
from psych_runtime.activities._secrets import (
    EnvSecretResolver,
    SecretNotFound,
    SecretResolver,
    StaticSecretResolver,
)
from psych_runtime.activities._tools import ToolActivities
from psych_runtime.activities._version_store import FileVersionStore

if TYPE_CHECKING:
    from psych_runtime.activities._mcp import McpActivities, check_servers

_LAZY = {"McpActivities", "check_servers"}
"""Names imported on first use: the ``mcp`` SDK takes one to two seconds to import here,
and workflows and every ``psych`` command import this package (for payload types and
ports) without touching MCP."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from psych_runtime.activities import _mcp

        return getattr(_mcp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTIVITY_NAMES",
    "ACTIVITY_ROLES",
    "BlobCipher",
    "BlobNotFound",
    "BlobStore",
    "ChatMessage",
    "CommandHook",
    "CompactionActivities",
    "ContextProvider",
    "ContextProviders",
    "ContextRequest",
    "ContextSettings",
    "ContextShown",
    "ContextSkipped",
    "ContextSource",
    "ContextTurn",
    "Conversations",
    "Decision",
    "Deny",
    "EncryptedBlobStore",
    "Endpoint",
    "EnvSecretResolver",
    "FileVersionStore",
    "Hook",
    "HookCall",
    "HookEffect",
    "Hooks",
    "Latency",
    "LocalBlobStore",
    "MODEL_CALL_FAILED",
    "McpActivities",
    "McpSettings",
    "ModelActivities",
    "ModelCallInput",
    "ModelCallResult",
    "ModelEndpoints",
    "ModelFailure",
    "ModelPrice",
    "Policy",
    "PolicyDecision",
    "Pricing",
    "ROLES",
    "RulePolicy",
    "S3BlobStore",
    "S3Location",
    "SUMMARISER_PROMPT",
    "SecretNotFound",
    "SecretResolver",
    "StaticSecretResolver",
    "TablePricing",
    "ToolActivities",
    "ToolCallRequest",
    "ToolDefinition",
    "ToolInfo",
    "ToolOutcome",
    "Usage",
    "blob_ref",
    "blob_store_from_env",
    "check_servers",
    "classify",
    "estimate_tokens",
    "invalid_arguments_message",
    "parse_s3_url",
    "policy_description",
    "policy_digest",
    "role_task_queue",
]
