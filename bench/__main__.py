"""``python -m bench``."""

from __future__ import annotations

from bench._main import main
from bench._process import exit_after

exit_after(main)
