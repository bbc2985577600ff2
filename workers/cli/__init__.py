"""psych_runtime.workers.cli: the ``psych`` command line.

``entry`` is the console script; ``main(argv)`` runs one command and returns its status.
Each module adds its commands to the parser: runs (``run``, ``status``, ``follow``, ...),
resume/abort/steer, specs (``validate``, ``publish``), serving (``worker``, ``dev``), fleet
(``replay``, ``promote``), hooks settings and the codec server.
"""

from psych_runtime.workers.cli._main import entry, main

__all__ = [
    "entry",
    "main",
]
