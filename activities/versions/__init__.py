"""psych_runtime.activities.versions: published Versions.

``FileVersionStore`` (the VersionStore port's file default) and ``VersionActivities``
(``psych.version.publish``, a spawned child's composed Spec).
"""

from psych_runtime.activities.versions._publish import VersionActivities
from psych_runtime.activities.versions._store import FileVersionStore

__all__ = [
    "FileVersionStore",
    "VersionActivities",
]
