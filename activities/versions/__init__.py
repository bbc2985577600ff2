"""psych_runtime.activities.versions: published Versions.

``FileVersionStore`` (the VersionStore port's file default), ``S3VersionStore`` (a fleet's
bucket), ``version_store_at`` (which one ``PSYCH_STORE`` names) and ``VersionActivities``
(``psych.version.publish``, a spawned child's composed Spec).
"""

from psych_runtime.activities.versions._config import version_store_at
from psych_runtime.activities.versions._publish import VersionActivities
from psych_runtime.activities.versions._s3 import S3VersionStore
from psych_runtime.activities.versions._store import FileVersionStore

__all__ = [
    "FileVersionStore",
    "S3VersionStore",
    "VersionActivities",
    "version_store_at",
]
