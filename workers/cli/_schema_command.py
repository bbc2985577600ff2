"""``psych schema``: print the JSON Schema of a Spec file, or write it to a file.

Editors with the YAML language server complete and check a Spec file that names the schema
in its first line (``# yaml-language-server: $schema=<path or URL>``); the schema is the
models' own (``psych_runtime.specs.spec_json_schema``), so it cannot say less than they do.
"""

from __future__ import annotations

import argparse
import sys


def cmd_schema(args: argparse.Namespace) -> int:
    """Print (or write) the Spec JSON Schema."""
    from psych_runtime.specs import spec_json_schema_text

    text = spec_json_schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as err:  # no such directory, a directory named so, no permission
        from psych_runtime.specs import PsychError

        raise PsychError(f"cannot write {args.output}: {err.strerror or err}") from err
    print(f"wrote {args.output}")
    return 0
