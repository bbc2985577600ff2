"""psych_runtime.activities: every side effect of a Run, and the ports they go through.

One subpackage per capability (``model``, ``tools``, ``mcp``, ``hooks``, ``blobs``,
``versions``, ``secrets``, ``telemetry``), and ``contract``: the payload types, activity
names and error types through which workflows, activities and workers meet (workflows
import only it). The names below are the ones users import; each subpackage lists its own.
The scriptable fake model server for tests is ``psych_runtime.testing`` (its files live in
``activities/testing/``).
"""

from typing import TYPE_CHECKING, Any

from psych_runtime.activities._activity_class import ActivityClass, activity_name
from psych_runtime.activities.blobs import (
    BlobCipher,
    BlobNotFound,
    BlobStore,
    Conversations,
    EncryptedBlobStore,
    LocalBlobStore,
    S3BlobStore,
    S3Location,
    blob_ref,
    blob_store_from_env,
    parse_s3_url,
)
from psych_runtime.activities.contract import (
    ACTIVITY_NAMES,
    ACTIVITY_ROLES,
    MODEL_CALL_FAILED,
    ROLES,
    ChatMessage,
    ContextShown,
    ContextSkipped,
    ContextTurn,
    Decision,
    ErrorType,
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
from psych_runtime.activities.hooks import CommandHook, Deny, Hook, HookCall, Hooks
from psych_runtime.activities.mcp import McpSettings
from psych_runtime.activities.model import (
    SUMMARISER_PROMPT,
    CompactionActivities,
    ContextProvider,
    ContextProviders,
    ContextRequest,
    ContextSettings,
    ContextSource,
    Endpoint,
    ModelActivities,
    ModelEndpoints,
    ModelPrice,
    Pricing,
    TablePricing,
    classify,
    estimate_tokens,
)
from psych_runtime.activities.secrets import (
    EnvSecretResolver,
    SecretNotFound,
    SecretResolver,
    StaticSecretResolver,
)
from psych_runtime.activities.tokens import (
    EncryptedTokenStore,
    LocalTokenStore,
    S3TokenStore,
    TokenKey,
    TokenStore,
    token_store_from_env,
)
from psych_runtime.activities.tools import (
    Policy,
    RulePolicy,
    ToolActivities,
    policy_description,
    policy_digest,
)
from psych_runtime.activities.versions import FileVersionStore

if TYPE_CHECKING:
    from psych_runtime.activities.mcp import McpActivities, check_servers

_LAZY = {"McpActivities", "check_servers"}
"""Names imported on first use: the ``mcp`` SDK takes one to two seconds to import here,
and workflows and every ``psych`` command import this package (for payload types and
ports) without touching MCP."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from psych_runtime.activities import mcp

        return getattr(mcp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTIVITY_NAMES",
    "ACTIVITY_ROLES",
    "ActivityClass",
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
    "EncryptedTokenStore",
    "Endpoint",
    "EnvSecretResolver",
    "ErrorType",
    "FileVersionStore",
    "Hook",
    "HookCall",
    "HookEffect",
    "Hooks",
    "Latency",
    "LocalBlobStore",
    "LocalTokenStore",
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
    "S3TokenStore",
    "SUMMARISER_PROMPT",
    "SecretNotFound",
    "SecretResolver",
    "StaticSecretResolver",
    "TablePricing",
    "TokenKey",
    "TokenStore",
    "ToolActivities",
    "ToolCallRequest",
    "ToolDefinition",
    "ToolInfo",
    "ToolOutcome",
    "Usage",
    "activity_name",
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
    "token_store_from_env",
]
