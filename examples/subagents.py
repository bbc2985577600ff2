"""An agent that delegates to a subagent, offline (fake model, embedded dev server).

``research-team.yaml``: the lead agent's model calls the built-in ``delegate`` tool; the
``researcher`` subagent runs as a child AgentRun (its records are shown indented), and its
answer is the tool's result the lead answers from. The report counts the child's calls.

    python examples/subagents.py
"""

from __future__ import annotations

import asyncio

from _offline import load, offline, run, status

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import exit_process

TASK = "What is the oak desk made of?"


async def main() -> int:
    spec = load("research-team.yaml")
    replies = (  # the lead, its researcher, then the lead again: the order calls come in
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": TASK})),
        Reply.text("Solid oak, oiled; 140 x 70 cm."),
        Reply.text("The oak desk is solid oiled oak and measures 140 x 70 cm."),
    )
    async with offline(*replies) as client:
        report = await run(client, spec, "Hi! What's your oak desk made of?")
    return status(report)


if __name__ == "__main__":
    exit_process(asyncio.run(main()))
