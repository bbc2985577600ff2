"""The part of publish-time validation that needs no worker: what a client checks before it
starts a Run from a Version it did not publish itself.

``validate`` asks three things of the world: which code tools the worker's ToolRegistry
holds, which models the endpoint knows, and which MCP servers answer. A client that starts
a Run from a Version (built with ``Version.of``, read from a document, or fetched from a
store someone else wrote to) knows none of them, but every other check (literal
credentials, URL templates, links, depths, names, envelopes, unsupported fields, size)
needs only the Spec, and a Run must not start from a Spec that fails one: validation
happens before a Run, never in the middle of it.
"""

from __future__ import annotations

from psych_runtime.specs._models import AgentSpec, CodeTool, WorkflowSpec
from psych_runtime.specs._nested import nested_specs
from psych_runtime.specs._problem import Problem
from psych_runtime.specs._validation import ValidationContext, validate


def _code_tools_of(spec: AgentSpec | WorkflowSpec) -> set[str]:
    """The names of every code tool ``spec`` declares, at any depth."""
    return {
        tool.name
        for _, node in nested_specs(spec)
        for tool in node.tools
        if isinstance(tool, CodeTool)
    }


def context_free_problems(spec: AgentSpec | WorkflowSpec) -> list[Problem]:
    """Every problem ``validate`` finds in ``spec`` without a worker's context: all of its
    checks but code tools' registration (the worker's registry; a Run's call of a tool its
    worker lacks fails that call), models (the endpoint; empty ``known_models`` checks
    none) and MCP reachability (a connection check; none was made).

    Returns:
        The problems, each with its path, in ``validate``'s order; empty = may run.
    """
    # Every code tool counts as registered: registration is the one check whose empty
    # context ("nothing registered") is not "don't check".
    return validate(spec, ValidationContext(registered_tools=_code_tools_of(spec)))
