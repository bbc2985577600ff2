"""psych_runtime.activities.a2a: A2A peers as tools.

``A2aActivities`` (a turn's catalogue of peer skills from their Agent Cards, and one
message to a peer) over the official ``a2a-sdk`` client, the worker's ``A2aSettings``, and
``check_peers`` (a Spec's peers' cards at publish, ``--check-connections``).
Imported lazily: the SDK (protobuf, its types) costs import time every ``psych`` command
would otherwise pay.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psych_runtime.activities.a2a._activities import A2aActivities
    from psych_runtime.activities.a2a._answer import TERMINAL
    from psych_runtime.activities.a2a._check import PeerCheck, check_peers
    from psych_runtime.activities.a2a._push import PeerPush, find_push
    from psych_runtime.activities.a2a._settings import A2A_SETTING_NAMES, A2aSettings

_LAZY = {
    "A2A_SETTING_NAMES": "_settings",
    "A2aActivities": "_activities",
    "A2aSettings": "_settings",
    "PeerCheck": "_check",
    "PeerPush": "_push",
    "TERMINAL": "_answer",
    "find_push": "_push",
    "check_peers": "_check",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "A2A_SETTING_NAMES",
    "A2aActivities",
    "A2aSettings",
    "PeerCheck",
    "PeerPush",
    "TERMINAL",
    "check_peers",
    "find_push",
]
