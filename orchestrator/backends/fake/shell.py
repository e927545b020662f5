"""A tiny `sh` for fake sandboxes: lists, redirections, expansion, scripts, and a vocabulary.

The vocabulary (`commands.py`, `fileutils.py`) is small on purpose: it is what trialbox's own
commands and the tests' tasks use, and the conformance suite runs every word of it against a
real container too, so the fake cannot drift. Anything outside it exits 127 with
`sh: CMD: not found`, as a missing program would. Not modelled: pipes, `&`, `if`/`for`,
globs, field splitting of unquoted expansions, `echo`'s backslash escapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from orchestrator.backends.fake import commands, fileutils
from orchestrator.backends.fake.files import DEV_NULL, FakeFiles
from orchestrator.backends.fake.lexer import ShellSyntaxError, split_list
from orchestrator.backends.fake.state import Capture, Discard, Exit, FileSink, ShellState, Sink
from orchestrator.backends.fake.words import Redirect, Word, assignment, parse_command

SHELLS = frozenset({"sh", "bash", "dash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/bin/dash"})

# Sends a signal ("TERM", "KILL", "0", …) to a pid, or to its group when the bool is set;
# False when there is no such process.
SignalHook = Callable[[int, bool, str], bool]
# `trap '' SIGNAL`: the process `pid` ignores that signal from now on.
IgnoreHook = Callable[[int, str], None]


class Shell:
    """Runs command text against one filesystem (and, for `kill`, one process table)."""

    def __init__(
        self, files: FakeFiles, signals: SignalHook | None = None, ignore: IgnoreHook | None = None
    ) -> None:
        self.files = files
        self.signals = signals
        self.ignore = ignore
        self.vocabulary = {**commands.PROGRAMS, **fileutils.PROGRAMS}

    async def run(self, text: str, state: ShellState) -> int:
        """Run `text` as one shell process; `exit` ends it here."""
        try:
            return await self.run_list(text, state)
        except Exit as done:
            state.status = done.status
            return done.status

    async def run_list(self, text: str, state: ShellState) -> int:
        try:
            chains = split_list(text)
        except ShellSyntaxError as exc:
            state.complain(f"sh: syntax error: {exc}\n")
            raise Exit(2) from None
        for chain in chains:
            ran_last = False
            for index, (op, raw) in enumerate(chain):
                if (op == "&&" and state.status != 0) or (op == "||" and state.status == 0):
                    ran_last = False
                    continue
                ran_last = index == len(chain) - 1
                state.status = await self._simple(raw, state)
            if state.errexit and state.status != 0 and ran_last:
                raise Exit(state.status)
        return state.status

    # -- one simple command -------------------------------------------------------------------

    async def expand(self, word: Word, state: ShellState) -> str:
        pieces = []
        for part in word:
            if part.kind == "text":
                pieces.append(part.value)
            elif part.kind == "var":
                special = {"?": str(state.status), "$": str(state.pid)}
                pieces.append(special.get(part.value, state.env.get(part.value, "")))
            else:
                pieces.append(await self.substitute(part.value, state))
        return "".join(pieces)

    async def substitute(self, inner: str, state: ShellState) -> str:
        """`$(inner)`: its standard output, trailing newlines removed."""
        captured = Capture()
        child = replace(state.child(), out=captured)
        await self.run(inner, child)
        return captured.data.decode(errors="replace").rstrip("\n")

    async def _simple(self, raw: str, state: ShellState) -> int:
        try:
            command = parse_command(raw)
        except ShellSyntaxError as exc:
            state.complain(f"sh: syntax error: {exc}\n")
            return 2
        assigned: dict[str, str] = {}
        argv: list[str] = []
        for word in command.words:
            pair = None if argv else assignment(word)
            if pair is not None:
                assigned[pair[0]] = await self.expand(pair[1], state)
                continue
            value = await self.expand(word, state)
            if value or any(part.quoted for part in word):  # an unquoted empty word vanishes
                argv.append(value)
        if argv[:1] == ["exec"] and len(argv) == 1:
            # `exec >file 2>&1`: the redirections stay for the rest of this shell.
            redirected = await self._redirect(command.redirects, state)
            if redirected is None:
                raise Exit(2)
            state.out, state.err = redirected.out, redirected.err
            return 0
        if not argv:
            state.env.update(assigned)
            return 0 if await self._redirect(command.redirects, state) is not None else 2
        local = await self._redirect(command.redirects, state)
        if local is None:
            return 2
        if assigned:
            local = replace(local, env={**local.env, **assigned})
        if argv[0] == "exec":  # `exec CMD`: CMD replaces the shell, its status ends it
            raise Exit(await self.execute(argv[1:], local))
        status = await self.execute(argv, local)
        if local is not state and not assigned:  # `cd` or `set` under a redirection
            state.cwd, state.errexit = local.cwd, local.errexit
        return status

    async def _redirect(
        self, redirects: tuple[Redirect, ...], state: ShellState
    ) -> ShellState | None:
        """`state` with these redirections applied; None (after saying why) when one fails."""
        if not redirects:
            return state
        out, err = state.out, state.err
        for redirect in redirects:
            target = await self.expand(redirect.target, state)
            if redirect.op == ">&":
                chosen = {"1": out, "2": err}.get(target)
                if chosen is None:
                    state.complain(f"sh: {target}: bad file descriptor\n")
                    return None
                out, err = (chosen, err) if redirect.fd == 1 else (out, chosen)
                continue
            path = self.files.norm(target, state.cwd)
            try:
                if redirect.op == "<":
                    if path != DEV_NULL:
                        self.files.read(path, state.user.who)
                    continue
                self.files.open_for_write(path, state.user.who, append=redirect.op == ">>")
            except OSError as exc:
                verb = "open" if redirect.op == "<" else "create"
                state.complain(f"sh: cannot {verb} {target}: {exc.strerror}\n")
                return None
            sink: Sink = Discard() if path == DEV_NULL else FileSink(self.files, path)
            if redirect.fd == 1:
                out = sink
            elif redirect.fd == 2:
                err = sink
        return replace(state, out=out, err=err)

    # -- programs -----------------------------------------------------------------------------

    async def execute(self, argv: list[str], state: ShellState) -> int:
        """Run one program: a word of the vocabulary, a shell, or a script by its path."""
        if not argv:
            return 0
        name = argv[0]
        builtin = self.vocabulary.get(name)
        if builtin is not None:
            return await builtin(self, argv, state)
        if name in SHELLS:
            return await self._shell(name, argv[1:], state)
        if "/" in name:
            return await self._script_by_path(name, state)
        state.complain(f"sh: {name}: not found\n")
        return 127

    async def _shell(self, name: str, args: list[str], state: ShellState) -> int:
        """`sh -c CMD`, `sh SCRIPT` (options such as -e before either). A script that cannot
        be read fails as each shell fails: bash with 126/127, dash with 2."""
        child = replace(state.child(), bash=name.endswith("bash"))
        while args and args[0].startswith("-") and args[0] != "-c":
            child.errexit = child.errexit or "e" in args[0]
            args = args[1:]
        if args[:1] == ["-c"]:
            return await self.run(args[1] if len(args) > 1 else "", child)
        if not args:
            return 0  # reads its (empty) standard input
        try:
            text = self.files.read(self.files.norm(args[0], state.cwd), state.user.who)
        except OSError as exc:
            if name.endswith("bash"):
                state.complain(f"bash: {args[0]}: {exc.strerror}\n")
                return 127 if isinstance(exc, FileNotFoundError) else 126
            state.complain(f"sh: cannot open {args[0]}: {exc.strerror}\n")
            return 2
        return await self.run(text.decode(errors="replace"), child)

    async def _script_by_path(self, path: str, state: ShellState) -> int:
        """An executable file run by its path: a shell script, unless its #! names another
        interpreter, which the fake does not have."""
        full = self.files.norm(path, state.cwd)
        try:
            self.files.check(full, state.user.who, 1)
            text = self.files.read(full, state.user.who).decode(errors="replace")
        except FileNotFoundError:
            state.complain(f"sh: {path}: not found\n")
            return 127
        except OSError:
            state.complain(f"sh: {path}: Permission denied\n")
            return 126
        interpreter = text.splitlines()[0][2:].split() if text.startswith("#!") else []
        program = interpreter[-1].rsplit("/", 1)[-1] if interpreter else "sh"
        if program not in ("sh", "bash", "dash"):
            state.complain(f"{path}: {' '.join(interpreter)}: not found\n")
            return 127
        return await self.run(text, replace(state.child(), bash=program == "bash"))
