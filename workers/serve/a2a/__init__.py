"""psych_runtime.workers.serve.a2a: every published agent served as an A2A agent.

``a2a_routes(...)`` is the mount ``create_app`` adds at ``/a2a/<agent>``: the agent's card,
and the JSON-RPC and HTTP+JSON bindings of ``a2a-sdk``'s server over
``PsychRequestHandler``, where a task is a Run (README.md in this folder).
"""

from psych_runtime.workers.serve.a2a._cards import (
    AgentCatalogue,
    ListedVersions,
    agent_card,
    instructions_summary,
)
from psych_runtime.workers.serve.a2a._handler import PsychRequestHandler
from psych_runtime.workers.serve.a2a._peer_push import PEER_PUSH_PATH, peer_push_route
from psych_runtime.workers.serve.a2a._push import PushRegistry
from psych_runtime.workers.serve.a2a._push_store import (
    PUSH_ISSUER,
    MemoryTokenStore,
    PushStore,
    Watched,
)
from psych_runtime.workers.serve.a2a._routes import A2A_PREFIX, a2a_routes

__all__ = [
    "A2A_PREFIX",
    "AgentCatalogue",
    "ListedVersions",
    "MemoryTokenStore",
    "PEER_PUSH_PATH",
    "PUSH_ISSUER",
    "PsychRequestHandler",
    "PushRegistry",
    "PushStore",
    "Watched",
    "a2a_routes",
    "agent_card",
    "instructions_summary",
    "peer_push_route",
]
