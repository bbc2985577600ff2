"""Text safe to show a person: the one escaping of what a terminal or a UI would act on.

Pure, so workflow code may use it too (a Run's current details, which the Temporal UI and
``temporal workflow metadata`` show) as well as every projection in ``workers``.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline (and a carriage return ending a line), DEL and C1
# controls: ESC starts ANSI and OSC 8 sequences (colours, cursor moves, hidden links), C1
# CSI/OSC do it in one character, a lone CR overwrites the line. And the bidirectional
# embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069; CVE-2021-42574), which
# reorder the text shown around them, so a line would read otherwise than it was written.
# The marks (U+200E, U+200F) stay: they reorder nothing beyond themselves.
_UNPRINTABLE = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]|\r(?!\n)"
)


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` safe to show a person: each control character a terminal would act on, and
    each bidirectional embedding, override or isolate, written as its escape (``\\x1b``,
    ``\\u202e``); newline and tab stay. Escaping twice changes nothing more."""
    return _UNPRINTABLE.sub(_escaped, text)
