"""``python -m psych_runtime.workers.cli``: the ``psych`` command, as the console script runs it."""

from psych_runtime.workers.cli._main import entry

entry()
