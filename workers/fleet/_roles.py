"""Worker roles: which task queues a worker polls, what it runs there, and how much at once.

A fleet is named by one base task queue (``PSYCH_TASK_QUEUE``, default ``psych``). The
workflows role polls the base itself, the model role ``<base>-model`` and the tools role
``<base>-tools`` (``role_task_queue``); each activity's role is fixed by
``ACTIVITY_ROLES``, which the workflow also reads to schedule it. A worker of role ``all``
runs the three in one process.

Whether a Run's activities go to the role queues is the fleet's to say, not each client's:
a workflows-role worker of a fleet running roles apart marks its workflows so
(``RolesApartInterceptor``), and a Run reads that once at its start and records it
(``psych_runtime.workflows`` ``ROLES_APART_EXTERN``; see docs/decisions/workers.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.worker import (
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from psych_runtime.activities import ACTIVITY_ROLES, ROLES, activity_name
from psych_runtime.activities.contract import MODEL_ROLE, TOOLS_ROLE, WORKFLOWS_ROLE
from psych_runtime.specs import SpecError
from psych_runtime.workflows import ROLES_APART_EXTERN

ALL = "all"
"""The role that stands for every role (``psych worker --role all``, the default)."""

DEFAULT_WORKFLOW_TASKS = 100
DEFAULT_MODEL_CALLS = 100
DEFAULT_TOOL_CALLS = 100


def parse_roles(values: Sequence[str]) -> tuple[str, ...]:
    """The roles named by ``values`` (each a role, ``all``, or a comma-separated list of
    them), in ``ROLES`` order without repeats; none at all means every role.

    Raises:
        SpecError: a value names no role.
    """
    named: set[str] = set()
    for value in values:
        for part in value.split(","):
            role = part.strip()
            if not role:
                continue
            if role == ALL:
                named.update(ROLES)
            elif role in ROLES:
                named.add(role)
            else:
                raise SpecError(f"unknown worker role {role!r}: one of {', '.join((*ROLES, ALL))}")
    return tuple(role for role in ROLES if role in named) if named else ROLES


@dataclass(frozen=True)
class Concurrency:
    """How much one worker process runs at once, per role.

    Attributes:
        workflow_tasks: workflow tasks at once on the workflows role
            (``PSYCH_MAX_WORKFLOW_TASKS``, default 100).
        model_calls: model calls at once on the model role (``PSYCH_MAX_MODEL_CALLS``,
            default 100: a model call mostly waits on the provider, so many fit one
            process; the provider's rate limit is the usual bound).
        tool_calls: tool, policy, catalogue and read-back activities at once on the tools
            role (``PSYCH_MAX_TOOL_CALLS``, default 100; lower it for tools that use
            this machine's CPU).
    """

    workflow_tasks: int = DEFAULT_WORKFLOW_TASKS
    model_calls: int = DEFAULT_MODEL_CALLS
    tool_calls: int = DEFAULT_TOOL_CALLS

    def __post_init__(self) -> None:
        for name in ("workflow_tasks", "model_calls", "tool_calls"):
            if getattr(self, name) < 1:
                raise SpecError(f"Concurrency.{name} must be at least 1")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Concurrency:
        """From ``PSYCH_MAX_WORKFLOW_TASKS``, ``PSYCH_MAX_MODEL_CALLS`` and
        ``PSYCH_MAX_TOOL_CALLS`` (each a positive whole number; unset is the default)."""
        return cls(
            workflow_tasks=_count(env, "PSYCH_MAX_WORKFLOW_TASKS", DEFAULT_WORKFLOW_TASKS),
            model_calls=_count(env, "PSYCH_MAX_MODEL_CALLS", DEFAULT_MODEL_CALLS),
            tool_calls=_count(env, "PSYCH_MAX_TOOL_CALLS", DEFAULT_TOOL_CALLS),
        )

    def worker_options(self, role: str) -> dict[str, int]:
        """The ``temporalio.worker.Worker`` options that bound ``role``'s worker."""
        if role == WORKFLOWS_ROLE:
            return {"max_concurrent_workflow_tasks": self.workflow_tasks}
        if role == MODEL_ROLE:
            return {"max_concurrent_activities": self.model_calls}
        if role == TOOLS_ROLE:
            return {"max_concurrent_activities": self.tool_calls}
        raise SpecError(f"unknown worker role {role!r}")


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SpecError(f"{name}={text!r} is not a whole number") from None
    if value < 1:
        raise SpecError(f"{name}={text!r} must be at least 1")
    return value


def activities_of_role(activities: Sequence[Callable[..., Any]], role: str) -> list[Any]:
    """The activities a worker of ``role`` registers.

    The workflows role registers every activity: a local activity runs on the worker
    running the workflow task, and a Run not dispatched ``roles_apart`` schedules all its
    activities on its own (the workflows role's) queue.
    """
    if role == WORKFLOWS_ROLE:
        return list(activities)
    return [fn for fn in activities if ACTIVITY_ROLES.get(activity_name(fn) or "") == role]


def runs_roles_apart(roles: Sequence[str], declared: bool | None) -> bool:
    """Whether a fleet whose worker process runs ``roles`` runs roles apart: as
    ``declared`` (``WorkerSettings.roles_apart``), else when the process does not run
    every role itself (another process must run the rest, on their own queues)."""
    if declared is not None:
        return declared
    return set(roles) != set(ROLES)


def _apart() -> bool:
    return True


class RolesApartInterceptor(Interceptor):
    """Tells the workflows this worker runs that its fleet runs roles apart (the extern
    function ``ROLES_APART_EXTERN``); a Run records what it reads at its start."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[ROLES_APART_EXTERN] = _apart
        return None
