"""A trusted hook module whose import fails (it reads a variable the environment lacks),
for the settings tests: ``tests.workers._hook_module_raises:check``."""

from __future__ import annotations

import os

from psych_runtime.activities import HookCall

TOKEN = os.environ["PSYCH_TEST_HOOK_TOKEN_THAT_IS_NEVER_SET"]


def check(call: HookCall) -> None:
    """Never reached: the module does not import."""
    return None
