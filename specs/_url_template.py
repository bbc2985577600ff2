"""An HTTP tool's URL template: its ``{name}`` placeholders, and which of them would let an
argument choose where the request goes."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def url_placeholders(url: str) -> list[str]:
    """The names of an HTTP tool's URL template's placeholders (``{name}``), in order."""
    return _PLACEHOLDER.findall(url)


def host_placeholders(url: str) -> list[str]:
    """The placeholders of an HTTP tool's URL template that fall in its scheme, host or
    port (``https://{host}/``, ``https://api.test{/suffix}``), where an argument (the
    model's) would choose where the request, and its credential, go. A tool may put
    arguments in its path and query only. Read as the request will be: each placeholder
    stands for a value with no ``/``, ``?`` or ``#`` (the tool percent-encodes them)."""
    names = url_placeholders(url)
    marked = url
    for index, name in enumerate(names):
        marked = marked.replace(f"{{{name}}}", _marker(index), 1)
    parts = urlsplit(marked)
    before_path = parts.scheme + parts.netloc
    return [name for index, name in enumerate(names) if _marker(index) in before_path]


def fragment_placeholders(url: str) -> list[str]:
    """The placeholders of an HTTP tool's URL template that fall in its fragment (after
    ``#``), which a client never sends: an argument filling one would be dropped."""
    names = url_placeholders(url)
    marked = url
    for index, name in enumerate(names):
        marked = marked.replace(f"{{{name}}}", _marker(index), 1)
    fragment = urlsplit(marked).fragment
    return [name for index, name in enumerate(names) if _marker(index) in fragment]


def _marker(index: int) -> str:
    return f"psychplaceholder{index}x"
