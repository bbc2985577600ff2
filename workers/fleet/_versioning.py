"""Worker Versioning: a worker's deployment and build, and promoting a build to current.

A worker that declares a deployment name and a build id (``--deployment``/
``PSYCH_DEPLOYMENT``, ``--build-id``/``PSYCH_BUILD_ID``) joins that Worker Deployment
Version on every task queue it polls. Its Runs are PINNED (``RUN_VERSIONING``): a Run stays on
the build it started on until it settles, so a build only ever replays histories it wrote
itself (see docs/decisions/workers.md). ``promote`` makes a build the deployment's current one:
Runs started afterwards run on it, pinned Runs finish where they began.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

from psych_runtime.specs import SpecError

MAX_BUILD_ID_BYTES = 255
"""The longest build id the Temporal server takes by default (``limit.workerBuildIdSize``)."""


def deployment_version(
    deployment: str | None, build_id: str | None
) -> WorkerDeploymentVersion | None:
    """The version a worker declares, or None for an unversioned worker (neither given).

    Raises:
        SpecError: only one of the two is given, the deployment name has a ``.``
            (Temporal's canonical ``<deployment>.<build id>`` would be ambiguous), or the
            build id is longer than the server takes (``MAX_BUILD_ID_BYTES``).
    """
    deployment = (deployment or "").strip() or None
    build_id = (build_id or "").strip() or None
    if deployment is None and build_id is None:
        return None
    if deployment is None or build_id is None:
        raise SpecError(
            "Worker Versioning needs both a deployment name and a build id "
            "(--deployment/PSYCH_DEPLOYMENT and --build-id/PSYCH_BUILD_ID), or neither"
        )
    if "." in deployment:
        raise SpecError(f"deployment name {deployment!r} may not contain '.'")
    size = len(build_id.encode())
    if size > MAX_BUILD_ID_BYTES:
        # The server drops such a worker's polls with no error the worker shows: it said
        # it polled, and was ready, and no task ever reached it.
        raise SpecError(
            f"--build-id/PSYCH_BUILD_ID: a build id of {size} bytes; Temporal takes at most "
            f"{MAX_BUILD_ID_BYTES} (its limit.workerBuildIdSize)"
        )
    return WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id)


def version_from_env(env: Mapping[str, str]) -> WorkerDeploymentVersion | None:
    """``deployment_version`` of ``PSYCH_DEPLOYMENT`` and ``PSYCH_BUILD_ID``."""
    return deployment_version(env.get("PSYCH_DEPLOYMENT"), env.get("PSYCH_BUILD_ID"))


RUN_VERSIONING = VersioningBehavior.PINNED
"""The versioning behaviour of AgentRun and WorkflowRun on a versioned worker.

Declared here, as the worker's default, rather than on their ``@workflow.defn``: the SDK
sends a workflow's declared behaviour on every task, and the server refuses it from a
worker that is not versioned ("versioning behavior cannot be specified without
deployment options"), so a declaration there would break every unversioned worker."""


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    """The SDK's deployment options for a worker of ``version``: versioned, its Runs
    ``RUN_VERSIONING`` (PINNED)."""
    return WorkerDeploymentConfig(
        version=version, use_worker_versioning=True, default_versioning_behavior=RUN_VERSIONING
    )


async def promote(client: Client, version: WorkerDeploymentVersion, *, identity: str) -> None:
    """Make ``version`` its deployment's current version: new Runs start on it, and Runs
    pinned to an older build finish there.

    The server refuses (an RPC error saying so) when the build has no poller on a task
    queue the current version polls, so a build missing a role is not promoted by mistake.
    """
    await client.workflow_service.set_worker_deployment_current_version(
        SetWorkerDeploymentCurrentVersionRequest(
            namespace=client.namespace,
            deployment_name=version.deployment_name,
            build_id=version.build_id,
            identity=identity,
        )
    )
