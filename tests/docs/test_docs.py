"""The docs site's generated references and the README, checked against the code.

The Spec reference must show every field of every model a Spec can hold (its type,
default, bounds and docstring) and the CLI reference every command and option of the
parser ``psych`` runs; both are rendered by the generators ``make docs`` runs
(docs/_gen/) and committed. The README stays short and true: its example is the example file, its
links reach pages that exist.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from pydantic import BaseModel

from psych_runtime.specs import AgentSpec, Limits, McpServer, WorkflowSpec, field_docs
from psych_runtime.workers.cli._parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "docs" / "_gen"


def generator(name: str) -> ModuleType:
    """A module of docs/_gen, loaded by path as MkDocs loads the hook."""
    spec = importlib.util.spec_from_file_location(f"docs_gen_{name}", GEN / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sections(page: str) -> dict[str, str]:
    """Each ``## `` section of a rendered page by its title."""
    parts = re.split(r"^## (.+)$", page, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def all_models() -> set[type[BaseModel]]:
    """Every model reachable from the two Spec kinds, walked here independently of the
    generator: through each field's annotation, unions and tuples included."""
    found: set[type[BaseModel]] = set()
    pending: list[object] = [AgentSpec, WorkflowSpec]
    while pending:
        item = pending.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item in found:
                continue
            found.add(item)
            for field in item.model_fields.values():
                pending.append(field.annotation)
        for arg in getattr(item, "__args__", ()):
            pending.append(arg)
        forward = getattr(item, "__forward_arg__", None)
        if forward is not None:
            pending.append({"WorkflowSpec": WorkflowSpec, "AgentSpec": AgentSpec}[forward])
    return found


@pytest.fixture(scope="module")
def spec_page() -> dict[str, str]:
    return sections(generator("spec_reference").render())


def row(section: str, field: str) -> list[str]:
    """The cells of ``field``'s row in a model's table."""
    for line in section.splitlines():
        if line.startswith(f"| `{field}` |"):
            return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
    raise AssertionError(f"no row for {field!r}")


def test_the_spec_reference_has_every_field_of_every_model(spec_page: dict[str, str]) -> None:
    models = all_models()
    assert {AgentSpec, WorkflowSpec, Limits, McpServer} <= models
    assert len(models) >= 15
    for model in models:
        assert model.__name__ in spec_page, f"no section for {model.__name__}"
        section = spec_page[model.__name__]
        docs = field_docs(model)
        assert set(docs) == set(model.model_fields) - {"kind"}, f"undocumented {model.__name__}"
        for name in model.model_fields:
            cells = row(section, name)
            if name in docs:
                assert " ".join(docs[name].split()) in cells[4].replace("\\|", "|")


def test_the_spec_reference_shows_types_defaults_and_bounds(spec_page: dict[str, str]) -> None:
    assert row(spec_page["Limits"], "max_steps")[1:4] == ["integer", "`48`", "> 0; <= 10000"]
    _name, type_text, default, bounds, _ = row(spec_page["AgentSpec"], "name")
    assert (type_text, default) == ("string", "required")
    assert bounds.startswith("matches `^[a-zA-Z_]")
    transport = row(spec_page["McpServer"], "transport")
    assert transport[1:3] == ["`'http'` \\| `'sse'`", "`'http'`"]
    # A field the runtime refuses at publish would say so; since issue 25 none is refused
    # (specs/_unsupported.py's tables are empty), so none says it.
    assert "refused at publish" not in row(spec_page["McpOAuth"], "cimd_url")[4]
    assert "refused at publish" not in row(spec_page["McpOAuth"], "grant")[4]
    assert "Not implemented yet" not in row(spec_page["AgentSpec"], "a2a_peers")[4]
    assert "[SpawnEnvelope](#spawnenvelope)" in row(spec_page["AgentSpec"], "spawn")[1]


def leaf_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.update(leaf_commands(child, (*path, name)))
            return found
    return {" ".join(path): parser}


def test_the_cli_reference_has_every_command_and_option() -> None:
    page = sections(generator("cli_reference").render())
    commands = leaf_commands(build_parser())
    assert {"run", "approve", "deploy promote", "hooks check", "serve"} <= set(commands)
    for name, parser in commands.items():
        assert f"psych {name}" in page, f"psych {name} is missing"
        text = page[f"psych {name}"]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            positional = action.metavar if isinstance(action.metavar, str) else action.dest
            for option in action.option_strings or [positional]:
                assert f"`{option}`" in text, f"psych {name}: {option} is missing"
            if action.help:
                assert " ".join(action.help.split()) in text.replace("\\|", "|")


def test_the_committed_reference_pages_are_what_the_code_renders() -> None:
    checked = subprocess.run(
        [sys.executable, GEN / "reference.py", "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert (ROOT / "docs/reference/spec.md").read_text() == generator("spec_reference").render()


README = (ROOT / "README.md").read_text()


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def test_the_readme_fits_a_screen_and_starts_with_the_two_quickstart_commands() -> None:
    assert len(README.splitlines()) <= 200
    first = fenced(README, "sh")[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["make demo", "make test"]


def test_the_readme_example_is_the_example_agent_and_its_tool() -> None:
    (spec,) = fenced(README, "yaml")
    # The same file, but for the editor's schema line, whose path is relative to each file.
    schema_line = "# yaml-language-server: $schema="
    first, rest = spec.split("\n", 1)
    assert first == schema_line + "specs/psych-spec.schema.json"
    example = (ROOT / "examples" / "support-agent.yaml").read_text()
    assert example.split("\n", 1) == [schema_line + "../specs/psych-spec.schema.json", rest]
    agent = AgentSpec.model_validate(yaml.safe_load(spec))
    code_tools = [tool.name for tool in agent.tools if tool.kind == "code"]
    assert code_tools == ["lookup_order"]
    (tool,) = fenced(README, "python")
    assert "def lookup_order(" in tool
    assert tool in (ROOT / "examples" / "tools.py").read_text()


def test_the_readme_links_reach_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/reference/") for link in links)
    for link in links:
        assert (ROOT / link).is_file(), link


@pytest.mark.parametrize("package", ["specs", "workflows", "activities", "workers"])
def test_each_package_readme_is_a_short_map(package: str) -> None:
    text = (ROOT / package / "README.md").read_text()
    assert len(text.splitlines()) <= 70
    assert f"docs/decisions/{package}.md" in text
    assert (ROOT / "docs" / "decisions" / f"{package}.md").is_file()
