"""Write (or check) the generated reference pages: ``python docs/_gen/reference.py``.

``docs/reference/spec.md`` comes from the pydantic models, ``docs/reference/cli.md`` from
``psych``'s argument parser. They are committed, so the README's links work where the
site is not built, and never edited by hand: ``make reference`` rewrites them, ``make
docs`` runs this with ``--check`` first and fails, naming the page, when one is stale.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import cli_reference
import spec_reference

DOCS = Path(__file__).resolve().parents[1]
PAGES: dict[str, Callable[[], str]] = {
    "reference/spec.md": spec_reference.render,
    "reference/cli.md": cli_reference.render,
}


def stale() -> list[str]:
    """The generated pages whose committed text differs from what the code renders."""
    return [
        page
        for page, render in PAGES.items()
        if not (DOCS / page).is_file() or (DOCS / page).read_text() != render()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        pages = stale()
        for page in pages:
            print(f"docs/{page} is stale: run `make reference`", file=sys.stderr)
        return 1 if pages else 0
    for page, render in PAGES.items():
        (DOCS / page).write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
