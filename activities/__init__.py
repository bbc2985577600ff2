"""psych_runtime.activities: every side effect of a Run, and the ports they go through.

Model calls over httpx, code and HTTP tools, policy, blobs, secrets, versions, pricing.
Workflows import only the payload types. The scriptable fake model server for tests is
``psych_runtime.testing`` (its files live in ``activities/testing/``).
"""

from psych_runtime.activities._blobs import (
    BlobCipher,
    BlobStore,
    Conversations,
    EncryptedBlobStore,
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
)
from psych_runtime.activities._policy import (
    Policy,
    RulePolicy,
    policy_description,
    policy_digest,
)
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
    "BlobCipher",
    "BlobStore",
    "ChatMessage",
    "Conversations",
    "Decision",
    "EncryptedBlobStore",
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
    "RulePolicy",
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
    "classify",
    "invalid_arguments_message",
    "policy_description",
    "policy_digest",
]
