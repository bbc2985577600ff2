"""Settings files: shape and problems, trust (modules and the project file), and binding
that is idempotent and pure."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from psych_runtime.activities import CommandHook, Hooks
from psych_runtime.specs import AccessDenied, SpecError
from psych_runtime.workers._settings import (
    PROJECT_SETTINGS,
    bind_settings,
    load_settings,
    parse_settings,
    worker_hooks,
)
from psych_runtime.workers._settings_file import default_global_settings
from tests.workers import _hook_module

TRUSTED = "trusted_modules: [tests.workers]\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_three_entry_forms_and_a_single_entry_for_a_one_item_list(tmp_path: Path) -> None:
    file = write(
        tmp_path / "g.yaml",
        TRUSTED + "hooks:\n"
        "  pre:\n"
        "    send_email: tests.workers._hook_module:deny_everything\n"
        "    'orders_*':\n"
        "      - {python: tests.workers._hook_module:deny_everything}\n"
        "      - {command: [/usr/bin/check, '{order_id}'], timeout_seconds: 3}\n"
        "  post: {'*': tests.workers._hook_module:shout}\n"
        "  on_error: {lookup: {command: [/bin/echo]}}\n",
    )
    hooks = worker_hooks(Hooks(), file, cwd=tmp_path, environ={})
    described = [(h.stage, h.pattern, h.name) for h in hooks.entries]
    assert described == [
        ("pre", "send_email", "tests.workers._hook_module:deny_everything"),
        ("pre", "orders_*", "tests.workers._hook_module:deny_everything"),
        ("pre", "orders_*", 'command:["/usr/bin/check", "{order_id}"]'),
        ("post", "*", "tests.workers._hook_module:shout"),
        ("on_error", "lookup", 'command:["/bin/echo"]'),
    ]
    assert hooks.entries[0].action is _hook_module.deny_everything
    command = hooks.entries[2].action
    assert isinstance(command, CommandHook) and command.timeout_seconds == 3


def test_every_problem_is_named_with_its_file_and_path() -> None:
    data = {
        "hookz": {},
        "hooks": {
            "pre": {
                "a*b": "m:f",
                "send": [{"command": "rm -rf / | tee"}, {"command": []}, 7, "nocolon"],
            },
            "later": {},
            "post": {"x": {"command": ["/bin/true"], "timeout_seconds": 0}},
        },
    }
    with pytest.raises(SpecError) as raised:
        parse_settings(data, source="g.yaml", scope="global")
    text = str(raised.value)
    for expected in (
        "g.yaml: hookz: unknown setting",
        "g.yaml: hooks.pre['a*b']: invalid tool pattern",
        "g.yaml: hooks.pre['send'][0].command: a shell string is refused",
        "g.yaml: hooks.pre['send'][1].command: a non-empty list",
        "g.yaml: hooks.pre['send'][2]: a hook is",
        "g.yaml: hooks.pre['send'][3]: 'nocolon' is not module:function",
        "g.yaml: hooks.later: unknown stage",
        "g.yaml: hooks.post['x'].timeout_seconds",
    ):
        assert expected in text, text


def test_yaml_is_loaded_with_the_spec_loaders_safety(tmp_path: Path) -> None:
    file = write(tmp_path / "g.yaml", "hooks: !!python/object:os.system {}\n")
    with pytest.raises(SpecError, match=r"g\.yaml"):
        load_settings(file, cwd=tmp_path, environ={})


def test_an_untrusted_module_stops_binding_with_a_permission_error(tmp_path: Path) -> None:
    file = write(
        tmp_path / "g.yaml",
        "trusted_modules: [acme.hooks]\n"
        "hooks: {pre: {'*': os:system, send: {python: tests.workers._hook_module:shout}}}\n",
    )
    with pytest.raises(PermissionError) as raised:
        worker_hooks(Hooks(), file, cwd=tmp_path, environ={})
    assert isinstance(raised.value, AccessDenied)
    assert "module 'os' is not trusted" in str(raised.value)
    assert "module 'tests.workers._hook_module' is not trusted" in str(raised.value)
    assert "acme.hooks" in str(raised.value)
    # Nothing trusted at all (no trusted_modules) is the same refusal.
    bare = write(tmp_path / "bare.yaml", "hooks: {pre: {'*': tests.workers._hook_module:shout}}\n")
    with pytest.raises(PermissionError, match="lists: none"):
        worker_hooks(Hooks(), bare, cwd=tmp_path, environ={})


def test_an_untrusted_module_and_a_load_problem_are_reported_together(tmp_path: Path) -> None:
    # psych hooks check prints every problem: the refusal carries the others along.
    file = write(
        tmp_path / "g.yaml",
        TRUSTED + "hooks: {pre: {a: os:system, b: tests.workers._hook_module:missing}}\n",
    )
    with pytest.raises(PermissionError) as raised:
        worker_hooks(Hooks(), file, cwd=tmp_path, environ={})
    text = str(raised.value)
    assert "module 'os' is not trusted" in text
    assert "hooks.pre['b']: cannot load tests.workers._hook_module:missing" in text


def test_a_trusted_module_that_does_not_load_is_a_spec_error(tmp_path: Path) -> None:
    file = write(
        tmp_path / "g.yaml",
        TRUSTED + "hooks: {pre: {a: tests.workers._hook_module:missing,"
        " b: tests.workers._hook_module:NOT_CALLABLE, c: tests.workers.nope:f}}\n",
    )
    with pytest.raises(SpecError) as raised:
        worker_hooks(Hooks(), file, cwd=tmp_path, environ={})
    text = str(raised.value)
    assert "hooks.pre['a']: cannot load" in text and "hooks.pre['b']" in text
    assert "hooks.pre['c']: cannot load tests.workers.nope:f" in text


def test_a_trusted_module_that_raises_on_import_is_a_problem_named_at_its_path(
    tmp_path: Path,
) -> None:
    """A hook module failing at import (a KeyError for a variable it reads, a syntax
    error) is one of the file's problems, named at its path, with the others; it was a
    traceback out of the worker's start and ``psych hooks check``, naming neither."""
    file = write(
        tmp_path / "g.yaml",
        TRUSTED + "hooks: {pre: {a: tests.workers._hook_module_raises:check,"
        " b: tests.workers._hook_module:missing}}\n",
    )
    with pytest.raises(SpecError) as raised:
        worker_hooks(Hooks(), file, cwd=tmp_path, environ={})
    text = str(raised.value)
    assert (
        f"{file}: hooks.pre['a']: cannot load tests.workers._hook_module_raises:check: "
        "importing it raised KeyError: 'PSYCH_TEST_HOOK_TOKEN_THAT_IS_NEVER_SET'"
    ) in text
    assert "hooks.pre['b']: cannot load tests.workers._hook_module:missing" in text


def test_the_project_file_loads_only_when_trusted_and_cannot_trust_modules(
    tmp_path: Path,
) -> None:
    write(tmp_path / PROJECT_SETTINGS, "hooks: {pre: {'*': {command: [/bin/false]}}}\n")
    untrusted = load_settings(None, cwd=tmp_path, environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert untrusted.files == () and untrusted.skipped_project == tmp_path / PROJECT_SETTINGS
    assert (
        worker_hooks(Hooks(), None, cwd=tmp_path, environ={"XDG_CONFIG_HOME": str(tmp_path)})
        == Hooks()
    )
    trusted = worker_hooks(
        Hooks(),
        None,
        trust_project_settings=True,
        cwd=tmp_path,
        environ={"XDG_CONFIG_HOME": str(tmp_path)},
    )
    assert [h.name for h in trusted.entries] == ['command:["/bin/false"]']
    write(tmp_path / PROJECT_SETTINGS, TRUSTED)
    with pytest.raises(SpecError, match="only the global settings file may trust modules"):
        load_settings(None, trust_project_settings=True, cwd=tmp_path, environ={})


def test_a_trusted_project_file_cannot_use_modules_the_global_file_does_not_trust(
    tmp_path: Path,
) -> None:
    write(tmp_path / PROJECT_SETTINGS, "hooks: {pre: {'*': tests.workers._hook_module:shout}}\n")
    with pytest.raises(PermissionError, match=r"tests\.workers\._hook_module"):
        worker_hooks(
            Hooks(),
            None,
            trust_project_settings=True,
            cwd=tmp_path,
            environ={"XDG_CONFIG_HOME": str(tmp_path)},
        )
    glob = write(tmp_path / "g.yaml", TRUSTED)
    hooks = worker_hooks(Hooks(), glob, trust_project_settings=True, cwd=tmp_path, environ={})
    assert [h.name for h in hooks.entries] == ["tests.workers._hook_module:shout"]


def test_global_file_paths(tmp_path: Path) -> None:
    assert default_global_settings({"XDG_CONFIG_HOME": "/x"}) == Path("/x/psych/settings.yaml")
    assert default_global_settings({}) == Path.home() / ".config" / "psych" / "settings.yaml"
    env_file = write(tmp_path / "env.yaml", "hooks: {pre: {a: {command: [/bin/true]}}}\n")
    loaded = load_settings(None, cwd=tmp_path, environ={"PSYCH_SETTINGS": str(env_file)})
    assert [f.path for f in loaded.files] == [env_file]
    # A named file must exist; the default path is read only when it does.
    with pytest.raises(SpecError, match="cannot read the global settings file"):
        load_settings(tmp_path / "missing.yaml", cwd=tmp_path, environ={})
    assert load_settings(None, cwd=tmp_path, environ={"XDG_CONFIG_HOME": str(tmp_path)}).files == ()


def test_trusted_modules_keeps_unset_apart_from_empty(tmp_path: Path) -> None:
    unset = parse_settings({}, source="g", scope="global")
    empty = parse_settings({"trusted_modules": []}, source="g", scope="global")
    assert unset.trusted_modules is None and empty.trusted_modules == ()


def test_binding_twice_gives_one_equal_chain_and_mutates_nothing(tmp_path: Path) -> None:
    file = write(
        tmp_path / "g.yaml",
        TRUSTED + "hooks: {pre: {'*': tests.workers._hook_module:deny_everything}}\n",
    )
    code = Hooks().post("*", _hook_module.shout)
    before = copy.copy(code.entries)
    loaded = load_settings(file, cwd=tmp_path, environ={})
    snapshot = copy.deepcopy(loaded)
    first = code.merged(bind_settings(loaded))
    second = code.merged(bind_settings(loaded))
    assert first == second and len(first) == 2
    # Binding the bound chain's declarations again adds nothing.
    assert first.merged(second) == first
    assert code.entries == before and loaded == snapshot
    assert worker_hooks(code, file, cwd=tmp_path, environ={}) == first


# --- egress ---------------------------------------------------------------------------------


def test_the_global_files_egress_section_adds_to_the_workers_own(tmp_path: Path) -> None:
    from psych_runtime.activities.egress import EgressRules, EgressSettings
    from psych_runtime.workers._settings import worker_egress

    path = tmp_path / "settings.yaml"
    path.write_text(
        "egress:\n"
        "  allow: [10.20.0.0/16, '*.corp.example']\n"
        "  deny: [admin.corp.example]\n"
        "  max_response_bytes: 1000\n"
        "  tenants:\n"
        "    acme: {allow: [api.acme.example]}\n"
    )
    given = EgressSettings(
        rules=EgressRules(allow_cidrs=("127.0.0.0/8",)),
        tenants={"acme": EgressRules(deny_hosts=("old.acme.example",))},
    )
    egress = worker_egress(given, path, cwd=tmp_path, environ={})
    assert egress.rules == EgressRules(
        allow_hosts=("*.corp.example",),
        allow_cidrs=("127.0.0.0/8", "10.20.0.0/16"),
        deny_hosts=("admin.corp.example",),
    )
    assert egress.tenants == {
        "acme": EgressRules(allow_hosts=("api.acme.example",), deny_hosts=("old.acme.example",))
    }
    assert egress.max_response_bytes == 1000


def test_a_project_file_may_not_widen_egress_and_bad_entries_are_named(tmp_path: Path) -> None:
    from psych_runtime.activities.egress import EgressSettings
    from psych_runtime.workers._settings import worker_egress

    project = tmp_path / ".psych" / "settings.yaml"
    project.parent.mkdir()
    project.write_text("egress: {allow: [0.0.0.0/0]}\n")
    with pytest.raises(SpecError, match="only the global settings file may set where"):
        worker_egress(EgressSettings(), None, trust_project_settings=True, cwd=tmp_path, environ={})
    path = tmp_path / "global.yaml"
    path.write_text("egress:\n  allow: [10.0.0.0/33]\n  tenants: {acme: [x]}\n  proxy: y\n")
    with pytest.raises(SpecError) as caught:
        worker_egress(EgressSettings(), path, cwd=tmp_path, environ={})
    message = str(caught.value)
    assert "egress.proxy: unknown setting" in message
    assert "'10.0.0.0/33' is not a CIDR" in message
    assert "egress.tenants.acme: a mapping with allow and deny lists" in message
