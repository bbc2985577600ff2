"""psych_runtime.activities.telemetry: the ``gen_ai`` spans and metrics of activities.

A model call's ``chat`` span, a tool call's ``execute_tool`` span and an HTTP request's
client span; nothing is recorded until ``instrument`` is called (``psych_runtime.workers``
does it when telemetry is configured).
"""

from psych_runtime.activities.telemetry._labels import (
    RUN_ATTRIBUTES,
    carry_run_labels,
    run_attributes,
)
from psych_runtime.activities.telemetry._spans import (
    INSTRUMENTATION_NAME,
    ChatCall,
    HttpCall,
    ToolCall,
    chat_span,
    egress_refused,
    http_span,
    instrument,
    tool_span,
    traced_tool,
    uninstrument,
)

__all__ = [
    "ChatCall",
    "HttpCall",
    "INSTRUMENTATION_NAME",
    "RUN_ATTRIBUTES",
    "ToolCall",
    "carry_run_labels",
    "chat_span",
    "egress_refused",
    "http_span",
    "instrument",
    "run_attributes",
    "tool_span",
    "traced_tool",
    "uninstrument",
]
