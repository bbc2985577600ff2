"""A workflow, offline (fake model, embedded dev server): ``onboarding-workflow.yaml``.

A WorkflowSpec is steps in order: here a tool step (``create_account``, a code tool of
``examples/tools.py``, run as one activity) and an agent step (a greeter, run as a child
AgentRun whose records are followed in place). The Run's report gives each step's output.

    python examples/workflow.py
"""

from __future__ import annotations

import asyncio

from _offline import load, offline, run, status
from tools import registry

from psych_runtime.testing import Reply
from psych_runtime.workers import exit_process

GREETING = "Welcome aboard, Ada! Your starter account is ready."


async def main() -> int:
    spec = load("onboarding-workflow.yaml")
    async with offline(Reply.text(GREETING), registry=registry) as client:
        report = await run(client, spec, "Onboard Ada Lovelace on the starter plan.")
    return status(report)


if __name__ == "__main__":
    exit_process(asyncio.run(main()))
