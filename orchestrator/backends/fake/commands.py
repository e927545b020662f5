"""The fake shell's vocabulary: the programs it knows, each as small as its use in trialbox.

`exit N`, `true`, `false`, `:`, `echo [-n]`, `cat`, `sleep N` (a real, cancellable asyncio
sleep), `id -u|-g|-un|-gn`, `pwd`, `cd`, `command -v`, `set -e|+e`, `export`, and
`kill -SIG [-]PID` (sent through the sandbox's process table); the file programs (`mkdir`,
`rm`, `chmod`) are in `fileutils.py`. Messages follow dash's wording closely enough
for the checks trialbox makes (`No such process`, `Permission denied`, `not found`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from orchestrator.backends.fake.state import Exit, ShellState

if TYPE_CHECKING:
    from orchestrator.backends.fake.shell import Shell

Program = Callable[["Shell", list[str], ShellState], Awaitable[int]]
KNOWN_PATHS = {"sh": "/bin/sh", "bash": "/bin/bash", "dash": "/bin/dash"}


def split_flags(args: list[str]) -> tuple[str, list[str]]:
    """Leading `-xyz` options as one string of letters, and the operands after them."""
    letters = ""
    while args and args[0].startswith("-") and len(args[0]) > 1 and args[0] != "--":
        letters += args[0][1:]
        args = args[1:]
    return letters, args[1:] if args[:1] == ["--"] else args


async def _true(shell: Shell, argv: list[str], state: ShellState) -> int:
    return 0


async def _false(shell: Shell, argv: list[str], state: ShellState) -> int:
    return 1


async def _exit(shell: Shell, argv: list[str], state: ShellState) -> int:
    if len(argv) < 2:
        raise Exit(state.status)
    if not argv[1].isdigit():
        state.complain(f"sh: exit: Illegal number: {argv[1]}\n")
        raise Exit(2)
    raise Exit(int(argv[1]) & 0xFF)


_DASH_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "a": "\a", "b": "\b"}


def _dash_escapes(text: str) -> tuple[str, bool]:
    """dash's `echo` reads backslash escapes (bash's does not); `\\c` ends all output."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            code = text[i + 1]
            if code == "c":
                return "".join(out), False
            if code in _DASH_ESCAPES:
                out.append(_DASH_ESCAPES[code])
                i += 2
                continue
        out.append(text[i])
        i += 1
    return "".join(out), True


async def _echo(shell: Shell, argv: list[str], state: ShellState) -> int:
    newline = argv[1:2] != ["-n"]
    text = " ".join(argv[1:] if newline else argv[2:])
    if not state.bash:
        text, go_on = _dash_escapes(text)
        newline = newline and go_on
    state.say(text + ("\n" if newline else ""))
    return 0


async def _cat(shell: Shell, argv: list[str], state: ShellState) -> int:
    status = 0
    for path in argv[1:]:
        try:
            state.out.write(shell.files.read(shell.files.norm(path, state.cwd), state.user.who))
        except OSError as exc:
            state.complain(f"cat: {path}: {exc.strerror}\n")
            status = 1
    return status


async def _sleep(shell: Shell, argv: list[str], state: ShellState) -> int:
    text = argv[1].removesuffix("s") if len(argv) > 1 else ""
    if text == "infinity":
        await asyncio.Event().wait()
    try:
        seconds = float(text)
    except ValueError:
        state.complain(f"sleep: invalid time interval '{text}'\n")
        return 1
    await asyncio.sleep(seconds)
    return 0


async def _id(shell: Shell, argv: list[str], state: ShellState) -> int:
    letters, _ = split_flags(argv[1:])
    user = state.user
    if not letters:
        state.say(f"uid={user.uid}({user.name}) gid={user.gid}({user.name})\n")
    elif "u" in letters:
        state.say(f"{user.name if 'n' in letters else user.uid}\n")
    elif "g" in letters:
        state.say(f"{user.name if 'n' in letters else user.gid}\n")
    else:
        state.complain(f"id: unknown option -{letters}\n")
        return 1
    return 0


async def _pwd(shell: Shell, argv: list[str], state: ShellState) -> int:
    state.say(state.cwd + "\n")
    return 0


async def _cd(shell: Shell, argv: list[str], state: ShellState) -> int:
    target = shell.files.norm(argv[1] if len(argv) > 1 else state.user.home, state.cwd)
    try:
        if not shell.files.check(target, state.user.who, 1).is_dir:
            raise NotADirectoryError(20, "Not a directory", target)
    except OSError:
        state.complain(f"sh: cd: can't cd to {argv[1] if len(argv) > 1 else target}\n")
        return 2
    state.cwd = target
    return 0


async def _command(shell: Shell, argv: list[str], state: ShellState) -> int:
    if argv[1:2] != ["-v"] or len(argv) < 3:
        state.complain("sh: command: only `command -v NAME` is in the vocabulary\n")
        return 2
    name = argv[2]
    if name in shell.vocabulary:
        state.say(f"{name}\n")
    elif name in KNOWN_PATHS:
        state.say(f"{KNOWN_PATHS[name]}\n")
    else:
        return 1
    return 0


async def _set(shell: Shell, argv: list[str], state: ShellState) -> int:
    for flag in argv[1:]:
        if flag[:1] in "-+" and "e" in flag:
            state.errexit = flag[0] == "-"
    return 0  # -a, -x, -u …: accepted, not modelled


async def _export(shell: Shell, argv: list[str], state: ShellState) -> int:
    for item in argv[1:]:
        name, sep, value = item.partition("=")
        if sep:
            state.env[name] = value
    return 0


async def _kill(shell: Shell, argv: list[str], state: ShellState) -> int:
    if len(argv) != 3 or not argv[1].startswith("-"):
        state.complain("sh: kill: only `kill -SIGNAL [-]PID` is in the vocabulary\n")
        return 2
    signal = argv[1][1:].upper().removeprefix("SIG")
    target = argv[2]
    group = target.startswith("-")
    pid = target.removeprefix("-")
    sent = pid.isdigit() and shell.signals is not None and shell.signals(int(pid), group, signal)
    if not sent:
        state.complain("sh: 1: kill: No such process\n")
        return 1
    return 0


async def _trap(shell: Shell, argv: list[str], state: ShellState) -> int:
    if len(argv) < 3 or argv[1] != "":
        state.complain("sh: trap: only `trap '' SIGNAL...` is in the vocabulary\n")
        return 2
    for name in argv[2:]:
        if shell.ignore is not None:
            shell.ignore(state.pid, name.upper().removeprefix("SIG"))
    return 0


PROGRAMS: dict[str, Program] = {
    "true": _true, ":": _true, "false": _false, "exit": _exit, "echo": _echo, "cat": _cat,
    "sleep": _sleep, "id": _id, "pwd": _pwd, "cd": _cd, "command": _command, "set": _set,
    "export": _export, "kill": _kill, "trap": _trap,
}  # fmt: skip
