"""psych_runtime.workflows.kernel: the Run kernel (see workflows/README.md).

What a feature may use of the kernel is re-exported here: the protocol (``Feature``,
``RunView``, ``Builtin``, ``CallDone``) and the tool-result helpers.
"""

from psych_runtime.workflows.kernel._feature import Builtin, CallDone, Feature, RunView
from psych_runtime.workflows.kernel._tool_result import ToolResult, from_outcome, inline

__all__ = [
    "Builtin",
    "CallDone",
    "Feature",
    "RunView",
    "ToolResult",
    "from_outcome",
    "inline",
]
