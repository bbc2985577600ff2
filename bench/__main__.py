"""``python -m bench``."""

from __future__ import annotations

import sys

from bench._main import main

sys.exit(main())
