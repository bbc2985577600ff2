"""What a workflow's tool step must name and give, checked at publish.

A ``ToolStep`` names one of the workflow's own tools or an MCP tool as the model sees it
(``_mcp_tool_names.py``), and its arguments are fixed in the Spec: an argument an HTTP
tool fills its URL with is known to be missing before the Run starts, where a Run would
fail at the step, after the earlier steps did their work. Pure.
"""

from __future__ import annotations

from psych_runtime.specs._mcp_tool_names import mcp_step_problem
from psych_runtime.specs._models import HttpTool, ToolStep, WorkflowSpec
from psych_runtime.specs._problem import Problem
from psych_runtime.specs._url_template import url_placeholders


def tool_step_problems(step: ToolStep, spec: WorkflowSpec, path: str) -> list[Problem]:
    """The problems of ``step`` of ``spec``, at ``path`` (``steps[name]``)."""
    tool = next((tool for tool in spec.tools if tool.name == step.tool), None)
    if tool is None:
        why = mcp_step_problem(step.tool, spec.mcp_servers)
        return [] if why is None else [Problem(f"{path}.tool", why)]
    if not isinstance(tool, HttpTool):
        return []
    return [
        Problem(
            f"{path}.arguments",
            f"no {name!r}: HTTP tool {tool.name!r} fills {{{name}}} of its URL with it",
        )
        # The tool sends no request without a value (None is none).
        for name in dict.fromkeys(url_placeholders(tool.url))
        if step.arguments.get(name) is None
    ]
