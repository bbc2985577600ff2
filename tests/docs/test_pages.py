"""What the hand-written pages say about the code, checked against it: the ``psych``
command lines they show, the pages and make targets they list, the example files they
copy, and the package READMEs' maps. Each check stands for a kind of staleness found in
the pages once (a guide the README's list lacked, a command list that lost six commands,
a module a map did not name)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from psych_runtime.specs import SuspensionPolicy
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workflows import SuspensionReason

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


def pages() -> list[Path]:
    """Every hand-written page a reader meets: the site's (not the generated reference
    pages) and every README of the repository outside the virtualenvs and build output."""
    generated = {DOCS / "reference" / "spec.md", DOCS / "reference" / "cli.md"}
    site = [page for page in DOCS.rglob("*.md") if page not in generated]
    readmes = [
        readme
        for readme in ROOT.rglob("README.md")
        if not readme.relative_to(ROOT).parts[0].startswith((".", "build"))
    ]
    return sorted(site + readmes)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    children = subcommands(parser)
    if children is None:
        return [" ".join(path)]
    return [leaf for name, child in children.items() for leaf in leaves(child, (*path, name))]


# `psych <command> [<subcommand>]` and the rest of its line (a shell line joined across
# its backslash continuations, or an inline code span).
COMMAND_LINE = re.compile(r"(?<![\w/.-])psych ([a-z][\w-]*)(?: ([a-z][\w-]*))?([^`\n]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def psych_lines(text: str) -> list[tuple[list[str], str]]:
    """Each ``psych ...`` command line of ``text``: its words that may name a command and
    the rest of the line."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for match in COMMAND_LINE.finditer(joined):
        words = [word for word in match.group(1, 2) if word]
        found.append((words, match.group(3)))
    return found


def wrong_commands(text: str) -> tuple[list[str], int]:
    """What ``text``'s ``psych`` command lines name that ``psych`` lacks (a subcommand, an
    option of the command it follows), and how many lines named a command."""
    commands = subcommands(build_parser())
    assert commands is not None
    wrong, checked = [], 0
    for words, rest in psych_lines(text):
        if words[0] not in commands:
            continue  # prose: "psych worker" is a command, "psych runtime" is not
        parser = commands[words[0]]
        used = [words[0]]
        nested = subcommands(parser)
        if nested is not None:
            if len(words) < 2:
                continue  # the group named in prose, as "psych deploy"
            if words[1] not in nested:
                wrong.append(f"psych {words[0]} {words[1]}: no such command")
                continue
            parser = nested[words[1]]
            used.append(words[1])
        else:
            rest = " ".join(words[1:]) + rest
        options = {option for action in parser._actions for option in action.option_strings}
        wrong += [
            f"psych {' '.join(used)} has no {option}"
            for option in OPTION.findall(rest)
            if option not in options
        ]
        checked += 1
    return wrong, checked


def test_every_psych_command_line_in_the_pages_names_a_command_and_options_it_has() -> None:
    total = 0
    for page in [*pages(), *sorted((ROOT / "examples").glob("*.py"))]:
        wrong, checked = wrong_commands(page.read_text())
        assert not wrong, f"{page.relative_to(ROOT)}: {wrong}"
        total += checked
    assert total > 100


def test_the_check_finds_a_command_or_option_that_does_not_exist() -> None:
    text = (
        "Run `psych run a.yaml --nope`, `psych deploy promot`, `psych runtime --x`.\n"
        "```sh\npsych deploy promote --deployment d \\\n    --build-idd 1\n```\n"
    )
    assert wrong_commands(text) == (
        [
            "psych run has no --nope",
            "psych deploy promot: no such command",
            "psych deploy promote has no --build-idd",
        ],
        2,
    )


# Code that starts with `psych <word>`: an inline code span, or a line of a shell block.
CODE_COMMAND = re.compile(r"`psych ([a-z][\w-]*)|^[ \t]*psych ([a-z][\w-]*)", re.MULTILINE)
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def commands_in_code_that_do_not_exist(text: str) -> list[str]:
    """The ``psych <word>`` that ``text`` writes as code (an inline code span, a shell
    block's line) whose word is no command: prose may say "psych runtime", code may not."""
    commands = subcommands(build_parser())
    assert commands is not None
    spans = [m.group(1) for m in CODE_COMMAND.finditer(text) if m.group(1)]
    lines = [
        m.group(2)
        for block in SHELL_BLOCK.findall(text)
        for m in CODE_COMMAND.finditer(block)
        if m.group(2)
    ]
    return [f"psych {word}: no such command" for word in [*spans, *lines] if word not in commands]


def test_every_psych_command_written_as_code_in_the_pages_exists() -> None:
    # docs/guides/a2a.md told operators to complete a peer's wait with `psych resume`,
    # which psych never had: the check above takes an unknown first word for prose.
    for page in pages():
        wrong = commands_in_code_that_do_not_exist(page.read_text())
        assert not wrong, f"{page.relative_to(ROOT)}: {wrong}"


def test_the_code_check_finds_a_command_that_does_not_exist() -> None:
    text = (
        "Complete it with `psych resume`, or `psych complete`; psych runtime is prose.\n"
        "```sh\npsych approve r c\n  psych approvee r c\n```\nnot code: psych nope\n"
    )
    assert commands_in_code_that_do_not_exist(text) == [
        "psych resume: no such command",
        "psych approvee: no such command",
    ]


EXAMPLE_SPEC = re.compile(r"(?<![\w/.-])(examples/[\w-]+\.ya?ml)")


def test_a_spec_file_a_page_passes_to_a_command_is_of_a_kind_its_help_names() -> None:
    # `psych run examples/onboarding-workflow.yaml` ran a workflow while `psych run --help`
    # called its argument an "agent Spec file".
    commands = subcommands(build_parser())
    assert commands is not None
    checked = 0
    for page in pages():
        for words, rest in psych_lines(page.read_text()):
            parser = commands.get(words[0])
            if parser is None or subcommands(parser) is not None:
                continue
            file = next((action for action in parser._actions if action.dest == "file"), None)
            if file is None or file.help is None:
                continue
            named = {kind for kind in ("agent", "workflow") if kind in file.help}
            for path in EXAMPLE_SPEC.findall(" ".join(words[1:]) + rest):
                kind = yaml.safe_load((ROOT / path).read_text())["kind"]
                assert not named or kind in named, (
                    f"{page.relative_to(ROOT)}: psych {words[0]} {path} runs a {kind}, "
                    f"but its help says: {file.help}"
                )
                checked += 1
    assert checked >= 10


def test_the_concepts_page_gives_each_wait_its_default_expiry() -> None:
    # The page gave approvals', questions' and external waits' defaults, not children's.
    page = " ".join((DOCS / "concepts.md").read_text().split())
    expiries = re.search(
        r"approvals and questions (\d+) h, external waits (\d+) days, children (\d+) h by default",
        page,
    )
    assert expiries is not None, "docs/concepts.md: no expiry defaults of the waits"
    hours, days, children = (float(value) for value in expiries.groups())
    policy = SuspensionPolicy()
    stated = {
        "approval_expires_seconds": hours * 3600,
        "question_expires_seconds": hours * 3600,
        "external_expires_seconds": days * 86400,
        "children_expires_seconds": children * 3600,
    }
    defaults = {
        name: getattr(policy, name)
        for name in SuspensionPolicy.model_fields
        if name.endswith("_expires_seconds")
    }
    assert stated == defaults


def test_the_examples_end_as_the_examples_page_tells_a_program_to_end() -> None:
    # A script that used a Temporal client and ended with asyncio.run alone aborted now and
    # then while the interpreter finalized (exit 134); the page never said so.
    page = " ".join((DOCS / "examples.md").read_text().split())
    assert "`exit_process(asyncio.run(main()))`" in page
    assert "Fatal Python error" in page
    for script in sorted((ROOT / "examples").glob("*.py")):
        text = script.read_text()
        runs = re.findall(r"^.*asyncio\.run\(.*$", text, re.MULTILINE)
        assert all("exit_process(asyncio.run(main(" in line for line in runs), script.name


def test_the_concepts_page_names_every_reason_a_run_suspends_for() -> None:
    # The page listed four reasons; an MCP server's OAuth consent (authorization) was not one.
    text = (DOCS / "concepts.md").read_text()
    section = text[text.index("\n## Suspensions\n") :]
    missing = [reason.value for reason in SuspensionReason if f"**{reason.value}**" not in section]
    assert not missing, f"docs/concepts.md, Suspensions, does not name {missing}"


def test_the_psych_command_guide_names_every_command() -> None:
    guide = (DOCS / "guides" / "psych-command.md").read_text()
    shown = {" ".join(words) for words, _ in psych_lines(guide)}
    shown |= {words[0] for words, _ in psych_lines(guide)}
    missing = [leaf for leaf in leaves(build_parser()) if leaf not in shown]
    assert not missing, f"docs/guides/psych-command.md shows no psych {missing}"


def test_the_readme_links_every_guide_and_reference_page() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README))
    wanted = {
        page.relative_to(ROOT).as_posix()
        for folder in ("guides", "reference")
        for page in (DOCS / folder).rglob("*.md")
    }
    wanted |= {f"docs/{name}" for name in ("getting-started.md", "concepts.md", "examples.md")}
    assert not wanted - linked, f"README.md does not link {sorted(wanted - linked)}"


def test_the_development_page_names_every_make_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (phony,) = re.findall(r"^\.PHONY: (.+)$", makefile, re.MULTILINE)
    page = (DOCS / "development.md").read_text()
    named = set(re.findall(r"make\s+([a-z-]+)", page)) | set(re.findall(r"`([a-z-]+)`", page))
    missing = [target for target in phony.split() if target not in named]
    assert not missing, f"docs/development.md names no make {missing}"


def without_comments(text: str) -> str:
    lines = [line.split(" #")[0].rstrip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith("#")) + "\n"


def test_the_example_specs_the_examples_page_copies_are_the_files() -> None:
    page = (DOCS / "examples.md").read_text()
    files = {
        without_comments(path.read_text()): path.name for path in (ROOT / "examples").glob("*.yaml")
    }
    copies = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
    shown = [body for body in copies if not body.startswith("--8<--")]
    assert len(shown) >= 3
    for body in shown:
        assert without_comments(body) in files, f"docs/examples.md: no file holds\n{body}"


PACKAGES = ["specs", "workflows", "activities", "workers", "workers/serve", "activities/testing"]


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_readme_names_every_module_and_subpackage(package: str) -> None:
    folder = ROOT / package
    readme = (folder / "README.md").read_text()
    subpackages = [f"{item.name}/" for item in folder.iterdir() if (item / "__init__.py").is_file()]
    modules = [item.name for item in folder.glob("*.py") if not item.name.startswith("__")]
    missing = sorted(name for name in subpackages + modules if name not in readme)
    assert not missing, f"{package}/README.md does not name {missing}"
