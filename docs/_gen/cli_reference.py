"""The CLI reference page, generated from the argument parser ``psych`` itself runs.

Walks ``build_parser()`` (workers/cli/_main.py): every command and subcommand with its
usage line, its positional arguments and options and their help text. Defaults that
come from the environment are named in the help texts, so the page does not depend on
the shell that builds it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from psych_runtime.workers.cli._parser import build_parser


def _subparsers(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def commands(
    parser: argparse.ArgumentParser | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """(command path, one-line help, parser) of every command that runs something."""
    parser = parser or build_parser()
    sub = _subparsers(parser)
    if sub is None:
        return
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    for name, child in sub.choices.items():
        path = (*prefix, name)
        if _subparsers(child) is None:
            yield path, helps.get(name, ""), child
        else:
            yield from commands(child, path)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _usage(parser: argparse.ArgumentParser) -> str:
    # argparse wraps usage to $COLUMNS; a fixed width keeps the page the same everywhere.
    formatter = argparse.HelpFormatter(parser.prog, width=88)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes_value = action.nargs != 0
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    names = ", ".join(f"`{option}`" for option in action.option_strings)
    return f"{names} `{metavar}`" if takes_value else names


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += " (one of: " + ", ".join(f"`{choice}`" for choice in action.choices) + ")"
    return text


def render() -> str:
    """The whole page, as Markdown."""
    lines = [
        "# CLI reference",
        "",
        "Generated from `psych`'s own argument parser by `make reference`",
        "(`docs/_gen/cli_reference.py`; do not edit). What the commands do, with examples, is in",
        "[the psych command](../guides/psych-command.md).",
        "",
        "| Command | What it does |",
        "|---|---|",
    ]
    found = list(commands())
    for path, summary, _ in found:
        name = " ".join(path)
        lines.append(f"| [`psych {name}`](#psych-{'-'.join(path)}) | {_cell(summary)} |")
    lines.append("")
    for path, summary, parser in found:
        lines += [f"## psych {' '.join(path)}", "", summary, "", "```text", _usage(parser), "```"]
        rows = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
        if rows:
            lines += ["", "| Argument | What it does |", "|---|---|"]
            for action in rows:
                lines.append(f"| {_argument(action)} | {_cell(_help(action))} |")
        lines.append("")
    return "\n".join(lines)
