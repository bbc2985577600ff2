"""psych_runtime.testing: helpers for testing code built on psych-runtime.

`FakeModel` is a scriptable OpenAI-compatible model server on loopback: a test queues what
the model answers (`Reply`, `ToolCall`, `Usage`), points a worker's endpoint at
`FakeModel.base_url`, and reads back every request the model received. It is the same
server psych-runtime's own tests and benchmarks use.
"""

from psych_runtime.testing._fake_model import FakeModel
from psych_runtime.testing._replies import Reply, ToolCall, Usage

__all__ = [
    "FakeModel",
    "Reply",
    "ToolCall",
    "Usage",
]
