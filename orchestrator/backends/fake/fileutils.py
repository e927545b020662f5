"""The vocabulary's file programs: `mkdir [-p] [-m MODE]`, `rm [-f] [-r]`, and
`chmod MODE|[ugoa][+-][rwx]`, acting as the exec's user on the fake filesystem, with the
messages coreutils prints (`cannot remove '…': No such file or directory`, …).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator.backends.fake.commands import Program, split_flags
from orchestrator.backends.fake.state import ShellState

if TYPE_CHECKING:
    from orchestrator.backends.fake.shell import Shell

_SYMBOLIC = re.compile(r"^([ugoa]*)([+-])([rwx]+)$")


async def _mkdir(shell: Shell, argv: list[str], state: ShellState) -> int:
    args, mode, parents = argv[1:], 0o755, False
    while args and args[0].startswith("-"):
        if args[0] == "-m" and len(args) > 1:
            mode, args = int(args[1], 8), args[2:]
            continue
        parents = parents or "p" in args[0]
        args = args[1:]
    status = 0
    for path in args:
        try:
            shell.files.mkdir(shell.files.norm(path, state.cwd), state.user.who,
                              parents=parents, mode=mode)  # fmt: skip
        except OSError as exc:
            state.complain(f"mkdir: cannot create directory '{path}': {exc.strerror}\n")
            status = 1
    return status


async def _rm(shell: Shell, argv: list[str], state: ShellState) -> int:
    letters, paths = split_flags(argv[1:])
    status = 0
    for path in paths:
        try:
            shell.files.remove(shell.files.norm(path, state.cwd), state.user.who,
                               recursive="r" in letters.lower())  # fmt: skip
        except FileNotFoundError:
            if "f" not in letters:
                state.complain(f"rm: cannot remove '{path}': No such file or directory\n")
                status = 1
        except OSError as exc:
            state.complain(f"rm: cannot remove '{path}': {exc.strerror}\n")
            status = 1
    return status


def _new_mode(spec: str, old: int) -> int | None:
    if re.fullmatch(r"[0-7]{1,4}", spec):
        return int(spec, 8)
    match = _SYMBOLIC.match(spec)
    if match is None:
        return None
    who, op, perms = match.groups()
    bits = sum({"r": 4, "w": 2, "x": 1}[p] for p in perms)
    shifts = {"u": [6], "g": [3], "o": [0]}
    mask = sum(bits << s for w in (who or "a").replace("a", "ugo") for s in shifts[w])
    return old | mask if op == "+" else old & ~mask


async def _chmod(shell: Shell, argv: list[str], state: ShellState) -> int:
    if len(argv) < 3:
        state.complain("chmod: missing operand\n")
        return 1
    status = 0
    for path in argv[2:]:
        full = shell.files.norm(path, state.cwd)
        node = shell.files.get(full)
        mode = _new_mode(argv[1], node.mode if node else 0)
        try:
            if mode is None:
                raise ValueError(argv[1])
            shell.files.chmod(full, mode, state.user.who)
        except ValueError:
            state.complain(f"chmod: invalid mode: '{argv[1]}'\n")
            return 1
        except OSError as exc:
            state.complain(f"chmod: cannot access '{path}': {exc.strerror}\n")
            status = 1
    return status


PROGRAMS: dict[str, Program] = {"mkdir": _mkdir, "rm": _rm, "chmod": _chmod}
