"""psych_runtime.workflows.features: what plugs into the Run kernel (see workflows/README.md).

``FEATURES`` lists every feature once, in hook order: the order their built-ins are
offered to the model, and the order their hooks run (and so schedule commands and write
records) at admission, at a turn boundary, into and after a model call, and before
settling. Appending a feature here is how it joins every Run kind.
"""

from psych_runtime.workflows.features._a2a import Peers
from psych_runtime.workflows.features._compaction import Compaction
from psych_runtime.workflows.features._components import Components
from psych_runtime.workflows.features._context import Context
from psych_runtime.workflows.features._mcp import Mcp
from psych_runtime.workflows.features._questions import Questions
from psych_runtime.workflows.features._results import Results
from psych_runtime.workflows.features._skills import Skills
from psych_runtime.workflows.features._spawn_collect import Spawn
from psych_runtime.workflows.features._subagents import Subagents
from psych_runtime.workflows.features._tasks import Tasks
from psych_runtime.workflows.features._threads import Threads
from psych_runtime.workflows.kernel import Feature

FEATURES: tuple[type[Feature], ...] = (
    Results,
    Skills,
    Questions,
    Subagents,
    Mcp,
    Peers,
    Tasks,
    Components,
    Spawn,
    Context,
    Compaction,
    Threads,
)

__all__ = [
    "Compaction",
    "Components",
    "Context",
    "FEATURES",
    "Mcp",
    "Peers",
    "Questions",
    "Results",
    "Skills",
    "Spawn",
    "Subagents",
    "Tasks",
    "Threads",
]
