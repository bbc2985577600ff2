"""Text every payload can carry: a string with its UTF-16 surrogate halves paired up."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with its surrogate halves paired up and any half left alone replaced by
    U+FFFD. JSON escapes a character outside the BMP as two halves (``\\ud83d\\ude00``): a
    provider or proxy that cuts its text by UTF-16 units sends them in two chunks, each
    decoded alone; Python decodes bytes that are not UTF-8 with "surrogateescape" (file
    names, a subprocess's output) into lone halves. Neither is text a payload can carry."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
