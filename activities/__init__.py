"""psych_runtime.activities: every side effect of a Run, and the ports they go through.

Model calls over httpx, code and HTTP tools, policy, blobs, secrets, versions, pricing.
Workflows import only the payload types. The scriptable fake model server for tests is
``psych_runtime.testing`` (its files live in ``activities/testing/``).
"""

from psych_runtime.activities._blob_config import blob_store_from_env
from psych_runtime.activities._blobs import (
    BlobNotFound,
    BlobStore,
    Conversations,
    LocalBlobStore,
    blob_ref,
)
from psych_runtime.activities._endpoints import (
    Endpoint,
    ModelEndpoints,
    ModelPrice,
    Pricing,
    TablePricing,
)
from psych_runtime.activities._model import MODEL_CALL_FAILED, ModelActivities
from psych_runtime.activities._model_failures import classify
from psych_runtime.activities._payloads import (
    ACTIVITY_NAMES,
    ACTIVITY_ROLES,
    ROLES,
    ChatMessage,
    Decision,
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

__all__ = [
    "ACTIVITY_NAMES",
    "ACTIVITY_ROLES",
    "BlobNotFound",
    "BlobStore",
    "ChatMessage",
    "Conversations",
    "Decision",
    "Endpoint",
    "EnvSecretResolver",
    "FileVersionStore",
    "Latency",
    "LocalBlobStore",
    "MODEL_CALL_FAILED",
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
    "classify",
    "invalid_arguments_message",
    "parse_s3_url",
    "policy_description",
    "policy_digest",
    "role_task_queue",
]
