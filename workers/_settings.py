"""Settings files: the tool-call hooks a worker loads from YAML, whom it trusts, and
where it may connect (``egress``, ``workers/_egress_settings.py``), how it talks to A2A
peers (``a2a``, ``workers/_a2a_settings.py``) and what each tenant may use (``permits``,
``workers/_permits_settings.py``); the ``serve`` section (who may call ``psych serve``,
``workers/serve/_settings.py``) is checked with the rest, though only ``psych serve`` reads it.

Two files, read when a worker is built (``worker_hooks``), never mutated, never cached:

- the **global** file, always loaded when it exists: ``--settings FILE``, else
  ``PSYCH_SETTINGS``, else ``~/.config/psych/settings.yaml`` (``$XDG_CONFIG_HOME`` when
  set). A file named by ``--settings`` or ``PSYCH_SETTINGS`` must exist;
- the **project** file, ``./.psych/settings.yaml`` (of the worker's working directory),
  loaded only with ``--trust-project-settings`` (``trust_project_settings=True``); an
  untrusted one is not read, and the worker logs that it was skipped.

The shape::

    trusted_modules: [acme.hooks]          # global file only
    hooks:
      pre:
        send_email: acme.hooks:check_recipient      # one entry, or a list of them
        "orders_*":
          - {python: acme.hooks:audit}
          - {command: ["/usr/local/bin/check-order", "{order_id}"], timeout_seconds: 5}
      post: {"*": acme.hooks:redact}
      on_error: {lookup: {command: [/usr/local/bin/fallback]}}

A Python hook (``module:function``) loads only when its module is, or is inside, one the
global file's ``trusted_modules`` lists; the project file cannot widen that list (a project
checkout must not be able to run code of its choosing in the worker). Anything else stops
the worker at start with a PermissionError (``AccessDenied``) naming the module. Every
other problem, each named with its file and path, is one ``SpecError``.

The chain: code-declared hooks (``WorkerSettings.hooks``) first, then the global file's,
then the project file's, each in file order; an entry equal to an earlier one is kept once.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.activities.egress import EgressSettings
from psych_runtime.activities.hooks import (
    DEFAULT_TIMEOUT_SECONDS,
    STAGES,
    CommandHook,
    Hook,
    HookAction,
    Hooks,
    HookStage,
    check_pattern,
)
from psych_runtime.specs import AccessDenied, SpecError, StaticPermits, load_yaml
from psych_runtime.workers._a2a_settings import A2aSection, parse_a2a
from psych_runtime.workers._egress_settings import merged, parse_egress
from psych_runtime.workers._permits_settings import parse_permits
from psych_runtime.workers._settings_file import default_global_settings

PROJECT_SETTINGS = Path(".psych") / "settings.yaml"
"""The project settings file, relative to the worker's working directory."""
_KEYS = frozenset({"a2a", "egress", "hooks", "permits", "serve", "trusted_modules"})
_log = logging.getLogger(__name__)
Scope = Literal["global", "project"]
_T = TypeVar("_T")


@dataclass(frozen=True)
class HookDeclaration:
    """One hook as a settings file declares it, before it is bound.

    Attributes:
        stage: ``pre``, ``post`` or ``on_error``.
        pattern: the tool name, ``prefix*`` or ``*``.
        python: ``module:function`` of a Python hook (None for a command hook).
        command: the argv of a command hook (None for a Python hook).
        timeout_seconds: a command hook's deadline.
        where: the file and path it was declared at, for messages.
    """

    stage: HookStage
    pattern: str
    python: str | None
    command: tuple[str, ...] | None
    timeout_seconds: float
    where: str


@dataclass(frozen=True)
class SettingsFile:
    """One parsed settings file.

    Attributes:
        path: where it was read from.
        scope: ``global`` or ``project``.
        trusted_modules: the allow-list it sets: None when it sets none (a project file
            never does), () when it sets an empty one (nothing trusted), else the modules.
        hooks: its hook declarations, in file order.
        egress: its ``egress`` section (``workers/_egress_settings.py``), if any.
        a2a: its ``a2a`` section (``workers/_a2a_settings.py``), if any.
        permits: its ``permits`` section (``workers/_permits_settings.py``), if any.
    """

    path: Path
    scope: Scope
    trusted_modules: tuple[str, ...] | None
    hooks: tuple[HookDeclaration, ...]
    egress: EgressSettings | None = None
    a2a: A2aSection | None = None
    permits: StaticPermits | None = None


@dataclass(frozen=True)
class LoadedSettings:
    """The settings files a worker reads.

    Attributes:
        files: the files loaded, global first.
        skipped_project: the project file when it exists but was not trusted.
    """

    files: tuple[SettingsFile, ...]
    skipped_project: Path | None = None

    def _global(self, section: Callable[[SettingsFile], _T | None]) -> _T | None:
        """The global file's ``section`` (None when it has none; only it may set one)."""
        found = (section(file) for file in self.files if file.scope == "global")
        return next((value for value in found if value is not None), None)

    @property
    def egress(self) -> EgressSettings | None:
        """The global file's ``egress`` section (None when it has none)."""
        return self._global(lambda file: file.egress)

    @property
    def a2a(self) -> A2aSection | None:
        """The global file's ``a2a`` section (None when it has none)."""
        return self._global(lambda file: file.a2a)

    @property
    def permits(self) -> StaticPermits | None:
        """The global file's ``permits`` section (None when it has none)."""
        return self._global(lambda file: file.permits)

    @property
    def trusted_modules(self) -> tuple[str, ...]:
        """The global file's allow-list (empty when it sets none)."""
        return self._global(lambda file: file.trusted_modules) or ()


def parse_settings(data: Any, *, source: str, scope: Scope) -> SettingsFile:
    """A settings document (plain data, as ``load_yaml`` returns it) checked whole.

    Raises:
        SpecError: every problem, each naming ``source`` and its path.
    """
    problems: list[str] = []
    trusted: tuple[str, ...] | None = None
    declarations: list[HookDeclaration] = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a settings file is a mapping, not {type(data).__name__}")
    for key in sorted(set(data) - _KEYS, key=str):
        problems.append(f"{source}: {key}: unknown setting (known: {', '.join(sorted(_KEYS))})")
    if "serve" in data:
        # Read by `psych serve` (workers/serve/_settings.py): who may call the API.
        if scope == "project":
            problems.append(f"{source}: serve: only the global settings file may configure serve")
        else:
            # Checked here too: a fleet's workers and `psych serve` share one file, and a
            # worker (or `psych hooks check`) that started on it said it was sound.
            _check_serve(data["serve"], source, problems)
    egress = None
    if "egress" in data:
        if scope == "project":
            problems.append(
                f"{source}: egress: only the global settings file may set where the worker connects"
            )
        else:
            egress = parse_egress(data["egress"], f"{source}: egress", problems)
    a2a = None
    if "a2a" in data:
        if scope == "project":
            problems.append(f"{source}: a2a: only the global settings file may set it")
        else:
            a2a = parse_a2a(data["a2a"], f"{source}: a2a", problems)
    permits = None
    if "permits" in data:
        if scope == "project":
            problems.append(f"{source}: permits: only the global settings file may set it")
        else:
            permits = parse_permits(data["permits"], f"{source}: permits", problems)
    if "trusted_modules" in data:
        value = data["trusted_modules"]
        if scope == "project":
            problems.append(
                f"{source}: trusted_modules: only the global settings file may trust modules"
            )
        elif not isinstance(value, list) or not all(_module_name(m) for m in value):
            problems.append(
                f"{source}: trusted_modules: a list of module names (a.b.c), not {value!r}"
            )
        else:
            trusted = tuple(value)
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        problems.append(f"{source}: hooks: a mapping of pre/post/on_error, not {hooks!r}")
    elif hooks:
        for stage in hooks:
            if stage not in STAGES:
                problems.append(f"{source}: hooks.{stage}: unknown stage (pre, post, on_error)")
                continue
            table = hooks[stage]
            if table is None:
                continue
            if not isinstance(table, dict):
                problems.append(f"{source}: hooks.{stage}: a mapping of tool patterns to hooks")
                continue
            for pattern, entries in table.items():
                where = f"{source}: hooks.{stage}[{pattern!r}]"
                try:
                    check_pattern(pattern)
                except ValueError as err:
                    problems.append(f"{where}: {err}")
                    continue
                items = entries if isinstance(entries, list) else [entries]
                for index, item in enumerate(items):
                    at = f"{where}[{index}]" if isinstance(entries, list) else where
                    declared = _declaration(stage, pattern, item, at, problems)
                    if declared is not None:
                        declarations.append(declared)
    if problems:
        raise SpecError("\n".join(problems))
    return SettingsFile(
        path=Path(source),
        scope=scope,
        trusted_modules=trusted,
        hooks=tuple(declarations),
        egress=egress,
        a2a=a2a,
        permits=permits,
    )


def _check_serve(section: Any, source: str, problems: list[str]) -> None:
    # Imported here: the serve package brings FastAPI, which only a file with a `serve:`
    # section needs to be checked.
    from psych_runtime.workers.serve._settings import parse_serve_section

    try:
        parse_serve_section(section, source)
    except SpecError as err:
        problems.append(str(err))


def _module_name(value: object) -> bool:
    return isinstance(value, str) and all(part.isidentifier() for part in value.split("."))


def _declaration(
    stage: HookStage, pattern: str, item: Any, at: str, problems: list[str]
) -> HookDeclaration | None:
    python: str | None = None
    command: tuple[str, ...] | None = None
    timeout = DEFAULT_TIMEOUT_SECONDS
    if isinstance(item, str):
        python = item
    elif isinstance(item, dict) and set(item) <= {"python"} and "python" in item:
        python = item["python"]
    elif (
        isinstance(item, dict) and "command" in item and set(item) <= {"command", "timeout_seconds"}
    ):
        argv = item["command"]
        if isinstance(argv, str):
            problems.append(
                f"{at}.command: a shell string is refused: give an argv list, e.g. "
                '["/usr/bin/check", "{order_id}"]'
            )
            return None
        if (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(a, str) and a for a in argv)
        ):
            problems.append(f"{at}.command: a non-empty list of non-empty strings, not {argv!r}")
            return None
        command = tuple(argv)
        timeout = item.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= 600
        ):
            problems.append(
                f"{at}.timeout_seconds: a number of seconds in (0, 600], not {timeout!r}"
            )
            return None
        try:
            # The hook's own rules (no placeholder in the program), named at their path
            # here rather than raised from binding the file.
            CommandHook(command, float(timeout))
        except ValueError as err:
            problems.append(f"{at}.command: {err}")
            return None
    else:
        problems.append(
            f'{at}: a hook is "module:function", {{python: module:function}} or '
            f"{{command: [argv...], timeout_seconds: N}}, not {item!r}"
        )
        return None
    if python is not None and not _python_target(python):
        problems.append(f"{at}: {python!r} is not module:function")
        return None
    return HookDeclaration(stage, pattern, python, command, float(timeout), at)


def _python_target(text: object) -> bool:
    if not isinstance(text, str) or text.count(":") != 1:
        return False
    module, attribute = text.split(":")
    return _module_name(module) and _module_name(attribute)


def read_settings_file(path: Path, scope: Scope) -> SettingsFile:
    """Read and parse one settings file (YAML, with the Spec loaders' safety bounds).

    Raises:
        SpecError: it cannot be read, or every problem in it.
    """
    try:
        document = path.read_bytes()
    except OSError as err:
        raise SpecError(f"{path}: cannot read the {scope} settings file: {err}") from err
    data = load_yaml(document, source=str(path))
    return parse_settings(data, source=str(path), scope=scope)


def global_settings_path(
    settings_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The global settings file to read: ``settings_file``, else ``PSYCH_SETTINGS`` (both
    must exist when named), else the default one when it exists; None: none to read."""
    env = os.environ if environ is None else environ
    named = settings_file if settings_file is not None else env.get("PSYCH_SETTINGS") or None
    if named is not None:
        return Path(named)
    default = default_global_settings(env)
    return default if default.is_file() else None


def load_settings(
    settings_file: Path | None = None,
    *,
    trust_project_settings: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """The settings files a worker reads (see the module docstring for which and when).

    Raises:
        SpecError: a named global file is missing, or a file has problems.
    """
    env = os.environ if environ is None else environ
    files: list[SettingsFile] = []
    found = global_settings_path(settings_file, env)
    if found is not None:
        files.append(read_settings_file(found, "global"))
    project = (cwd if cwd is not None else Path.cwd()) / PROJECT_SETTINGS
    skipped = None
    if project.is_file():
        if trust_project_settings:
            files.append(read_settings_file(project, "project"))
        else:
            skipped = project
            _log.warning(
                "project settings %s not loaded: it is not trusted (start the worker with "
                "--trust-project-settings to load it)",
                project,
            )
    return LoadedSettings(files=tuple(files), skipped_project=skipped)


def bind_settings(loaded: LoadedSettings) -> Hooks:
    """The hook chain the loaded files declare, their Python hooks imported.

    Raises:
        AccessDenied: (a PermissionError) a Python hook's module is not trusted; the
            message names every such module and where it was declared.
        SpecError: a trusted module or its function cannot be loaded.
    """
    trusted = loaded.trusted_modules
    refused: list[str] = []
    problems: list[str] = []
    entries: list[Hook] = []
    for file in loaded.files:
        for declared in file.hooks:
            action: HookAction
            if declared.command is not None:
                action = CommandHook(declared.command, declared.timeout_seconds)
                entries.append(Hook(declared.stage, declared.pattern, action))
                continue
            assert declared.python is not None
            module, attribute = declared.python.split(":")
            if not any(module == t or module.startswith(t + ".") for t in trusted):
                refused.append(f"{declared.where}: module {module!r} is not trusted")
                continue
            try:
                loaded_module = importlib.import_module(module)
                function = getattr(loaded_module, attribute)
            except (ImportError, AttributeError) as err:
                problems.append(f"{declared.where}: cannot load {declared.python}: {err}")
                continue
            except Exception as err:  # the module's own code failed (a SyntaxError too)
                problems.append(
                    f"{declared.where}: cannot load {declared.python}: importing it raised "
                    f"{type(err).__name__}: {err}"
                )
                continue
            if not callable(function):
                problems.append(f"{declared.where}: {declared.python} is not callable")
                continue
            entries.append(Hook(declared.stage, declared.pattern, function, declared.python))
    if refused:
        allowed = ", ".join(trusted) or "none"
        # The other problems go along, so one check names everything to fix.
        also = ("\nand other problems:\n  " + "\n  ".join(problems)) if problems else ""
        raise AccessDenied(
            "refusing to load Python hooks from untrusted modules (trusted_modules in the "
            f"global settings file lists: {allowed}):\n  " + "\n  ".join(refused) + also
        )
    if problems:
        raise SpecError("\n".join(problems))
    return Hooks(entries)


def worker_egress(
    given: EgressSettings,
    settings_file: Path | None = None,
    *,
    trust_project_settings: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> EgressSettings:
    """The egress settings a worker runs with: ``given``, plus the global file's section.

    Raises:
        SpecError: a problem of the settings files.
    """
    loaded = load_settings(
        settings_file, trust_project_settings=trust_project_settings, cwd=cwd, environ=environ
    )
    return merged(given, loaded.egress)


def worker_a2a(
    given: A2aSettings,
    settings_file: Path | None = None,
    *,
    trust_project_settings: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> A2aSettings:
    """The A2A settings a worker runs with: ``given``, the global file's keys replacing it.

    Raises:
        SpecError: a problem of the settings files.
    """
    loaded = load_settings(
        settings_file, trust_project_settings=trust_project_settings, cwd=cwd, environ=environ
    )
    return given if loaded.a2a is None else loaded.a2a.over(given)


def worker_hooks(
    code: Hooks,
    settings_file: Path | None = None,
    *,
    trust_project_settings: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Hooks:
    """The whole chain a worker runs: ``code``'s hooks, then the settings files'.

    Pure: the same declarations give an equal chain, and nothing passed in is changed.

    Raises:
        AccessDenied: an untrusted Python hook module.
        SpecError: any other problem of the settings files.
    """
    loaded = load_settings(
        settings_file, trust_project_settings=trust_project_settings, cwd=cwd, environ=environ
    )
    return code.merged(bind_settings(loaded))
