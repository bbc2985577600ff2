"""Command hooks: a tool-call hook that runs a program (an argv list, never a shell).

The program gets ``{argument_key}`` placeholders in its argv filled from the call's
arguments, a JSON document on stdin (the arguments for a pre hook; the tool's name, the
arguments and the result or failure for post and on_error hooks), the call named in its
environment (``PSYCH_HOOK_TOOL``, ...: ``call_environment``), and has ``timeout_seconds`` (10 s by
default) to exit. It runs in a session of its own, so on timeout its whole process group
(it and anything it started) is killed with SIGKILL and reaped, within ``REAP_SECONDS``.

What the exit status and stdout mean is the hook stage's business (``activities/hooks/_hooks.py``);
this module only runs the program and says what happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

DEFAULT_TIMEOUT_SECONDS = 10.0
"""How long a command hook may run before its process group is killed."""
REAP_SECONDS = 2.0
"""How long a killed command hook's process may take to be reaped."""
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MAX_OUTPUT_BYTES = 1_000_000
"""More stdout than this from a hook is refused: it is a rewrite, not a data dump."""


@dataclass(frozen=True)
class CommandHook:
    """A hook that runs ``argv`` as a subprocess.

    Attributes:
        argv: the program and its arguments; ``{key}`` in an item is replaced by the
            call's argument ``key`` (strings as they are, other values as JSON).
        timeout_seconds: the deadline, after which the process group is killed.
    """

    argv: tuple[str, ...]
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        # A string is refused even though it is a sequence: it would be one program name
        # holding a whole shell line, which is what a command hook must never be.
        argv: object = self.argv
        if not isinstance(argv, tuple):
            raise TypeError(
                f"a command hook is an argv list of strings, not {type(argv).__name__}"
                f" {argv!r}: shell strings are refused"
            )
        if not self.argv or not all(isinstance(item, str) and item for item in self.argv):
            raise ValueError(f"a command hook's argv must be non-empty strings: {self.argv!r}")
        if _PLACEHOLDER.search(self.argv[0]):
            # The model's arguments fill placeholders: in the program it would choose what runs.
            raise ValueError(
                f"a command hook's program cannot hold a placeholder: {self.argv[0]!r}"
            )
        if not 0 < self.timeout_seconds <= 600:
            raise ValueError(f"timeout_seconds must be in (0, 600]: {self.timeout_seconds!r}")

    @classmethod
    def of(
        cls, argv: Sequence[str] | str, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    ) -> CommandHook:
        """A command hook from a list of strings (a string is refused: no shell).

        Raises:
            TypeError: ``argv`` is a string.
            ValueError: it is empty or holds an empty or non-string item.
        """
        if isinstance(argv, str):
            raise TypeError(
                f"a command hook is an argv list, not the string {argv!r}: shell strings "
                'are refused (write it as a list, e.g. ["/usr/bin/check", "{order_id}"])'
            )
        return cls(tuple(argv), timeout_seconds)

    @property
    def name(self) -> str:
        """How records and ``psych hooks check`` name it."""
        return "command:" + json.dumps(list(self.argv), ensure_ascii=False)

    def command_line(self, arguments: Mapping[str, Any]) -> list[str]:
        """``argv`` with its placeholders filled from ``arguments``.

        Raises:
            KeyError: a placeholder names an argument the call does not have.
        """

        def fill(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in arguments:
                raise KeyError(f"placeholder {{{key}}} names no argument of the call")
            value = arguments[key]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

        return [_PLACEHOLDER.sub(fill, item) for item in self.argv]


@dataclass(frozen=True)
class CommandResult:
    """How a command hook ended.

    Attributes:
        returncode: the exit status (None when it did not start or timed out).
        stdout: what it printed (decoded, replacement characters for bad UTF-8).
        stderr: what it printed on stderr, or why it did not run.
        timed_out: it was killed at its deadline.
        pid: its process id (None when it did not start), for tests and logs.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    pid: int | None = None

    @property
    def ok(self) -> bool:
        """It started, ended by itself within its deadline and exited 0."""
        return self.returncode == 0 and not self.timed_out

    def reason(self) -> str:
        """Why it failed, in words (its stderr when it said something)."""
        said = self.stderr.strip()
        if self.timed_out:
            return said or "the command hook timed out"
        if self.returncode is None:
            return said or "the command hook did not start"
        return said or f"the command hook exited with status {self.returncode}"


class Called(Protocol):
    """What a command hook is told of the call it is asked about (a ``HookCall``)."""

    @property
    def tool(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def arguments(self) -> Mapping[str, Any]: ...
    @property
    def call_id(self) -> str: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def tenant(self) -> str | None: ...
    @property
    def principal(self) -> str | None: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


_TOLD = "PSYCH_HOOK_"
"""The prefix of the variables that name the call (``call_environment``)."""


def call_environment(call: Called) -> dict[str, str]:
    """The worker's environment, and the call a hook runs for: ``PSYCH_HOOK_TOOL``,
    ``PSYCH_HOOK_KIND``, ``PSYCH_HOOK_CALL_ID`` and, when known, ``PSYCH_HOOK_RUN_ID``,
    ``PSYCH_HOOK_TENANT``, ``PSYCH_HOOK_PRINCIPAL`` and ``PSYCH_HOOK_LABELS`` (the Scope's
    labels as a JSON object, with the tenant; a pre hook's stdin is the arguments alone).
    The worker's own ``PSYCH_HOOK_*`` variables are left out: one the call does not know is
    absent, never another call's."""
    told = {
        "PSYCH_HOOK_TOOL": call.tool,
        "PSYCH_HOOK_KIND": call.kind,
        "PSYCH_HOOK_CALL_ID": call.call_id,
        "PSYCH_HOOK_RUN_ID": call.run_id,
        "PSYCH_HOOK_TENANT": call.tenant,
        "PSYCH_HOOK_PRINCIPAL": call.principal,
        "PSYCH_HOOK_LABELS": None if call.tenant is None else json.dumps(dict(call.labels)),
    }
    inherited = {key: value for key, value in os.environ.items() if not key.startswith(_TOLD)}
    return {**inherited, **{key: value for key, value in told.items() if value is not None}}


async def run_command(hook: CommandHook, call: Called, stdin: Any) -> CommandResult:
    """Run ``hook`` for ``call`` (its arguments fill the placeholders; the call is named in
    the environment, ``call_environment``) with ``stdin`` (JSON-encoded) and wait for it, at
    most its deadline.

    Never raises for the program's own failures (a missing program, a placeholder with no
    argument, a non-zero exit, a timeout): they are the result. Cancellation kills the
    process group too, then propagates.
    """
    import asyncio  # here: declaring a hook (the settings files, psych validate) needs none

    try:
        argv = hook.command_line(call.arguments)
    except KeyError as err:
        return CommandResult(None, "", f"{hook.name}: {err.args[0]}")
    data = json.dumps(stdin, ensure_ascii=False, default=str).encode()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            env=call_environment(call),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # Its own session and process group: a timeout kills everything it started.
            start_new_session=True,
        )
    except OSError as err:
        return CommandResult(None, "", f"{hook.name} could not start: {err}")
    try:
        async with asyncio.timeout(hook.timeout_seconds):
            out, err_out = await process.communicate(data)
    except TimeoutError:
        await _kill_group(process)
        return CommandResult(
            None,
            "",
            f"{hook.name} timed out after {hook.timeout_seconds:g} s (its process group was "
            "killed)",
            timed_out=True,
            pid=process.pid,
        )
    except BaseException:
        await _kill_group(process)
        raise
    if len(out) > _MAX_OUTPUT_BYTES:
        return CommandResult(
            None, "", f"{hook.name} printed more than {_MAX_OUTPUT_BYTES} bytes", pid=process.pid
        )
    return CommandResult(
        process.returncode,
        out.decode(errors="replace"),
        err_out.decode(errors="replace"),
        pid=process.pid,
    )


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the process's group and reap the process within ``REAP_SECONDS``."""
    import asyncio

    # ProcessLookupError: the group is already gone, nothing left to kill.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        async with asyncio.timeout(REAP_SECONDS):
            await process.wait()
    except TimeoutError:
        # SIGKILL cannot be ignored, so only an uninterruptible sleep (D state) lands
        # here; say so rather than pretend it was reaped.
        raise RuntimeError(
            f"command hook process {process.pid} was killed but not reaped within "
            f"{REAP_SECONDS:g} s"
        ) from None
