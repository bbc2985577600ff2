"""The payload of ``psych.version.publish``."""

from __future__ import annotations

from psych_runtime.activities.contract._base import _Payload
from psych_runtime.specs import AgentSpec


class VersionPublishInput(_Payload):
    """Argument of ``psych.version.publish``: a Spec a Run composed (a spawned child's)."""

    run_id: str
    """The Run that composed it (for the activity's logs and spans)."""
    spec: AgentSpec
