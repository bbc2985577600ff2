"""``python -m bench``."""

from __future__ import annotations

from bench._main import main
from psych_runtime.workers import exit_process

exit_process(main())  # not sys.exit: Temporal's threads may abort a finalizing interpreter
