"""A few words of sh for the task's own text in a fake sandbox: what a test writes as its
test.sh, solve.sh or `command:` agent ("echo 1 > /logs/verifier/reward.txt"), no more.

trialbox's own commands never come here (the sandbox answers them by kind). A line is simple
commands joined by `;`, `&&` or `||`, each with `>`, `>>` or `>&2`; `$NAME`, `${NAME}` and
`$?` expand outside single quotes, without field splitting. The words are `echo [-n]`, `cat`,
`true`, `false`, `:`, `exit [N]`, `sleep N`, `trap '' TERM`, `id -u|-g|-un`, `pwd`,
`mkdir -p`, `rm -f|-rf` and `sh|bash FILE`; anything else is "not found" (127). A test that
needs more gives the backend a handler: `agent` runs in place of the relay's subject (after
the launch recorded the pid, sourced the credentials and sent output to /logs/agent),
`verifier` in place of tests/test.sh (its output to /logs/verifier/test-stdout.txt). It gets
an `ExecCall`, may write files (`sandbox.files`), run these words (`await call.sh(...)`),
print, sleep or wait, and returns an exit code (None is 0).
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from orchestrator.backends.fake.files import FakeFiles

if TYPE_CHECKING:
    from orchestrator.backends.fake.sandbox import FakeSandbox

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+)|(\?))")
_SHELLS = ("sh", "bash", "/bin/sh", "/bin/bash")
# How trialbox runs a task's script (bash where there is one): here, simply `sh`.
_EITHER_SHELL = "$(command -v bash || echo sh)"
_CONTROL = frozenset({"if", "then", "for", "while", "until", "case", "do", "done", "fi", "{", "}"})


class Exit(Exception):
    """`exit N`: ends the innermost script."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class Context:
    """One running script: its files, variables, folder, user and where its output goes."""

    files: FakeFiles
    env: dict[str, str]
    cwd: str
    user: tuple[str, int, int]  # name, uid, gid
    out: Callable[[bytes], None]
    err: Callable[[bytes], None]
    on_trap: Callable[[str], None] = lambda _name: None
    status: int = 0


def _quoting(text: str) -> list[str]:
    """The quote each character of `text` stands in: "'", '"' or ""."""
    states, quote = [], ""
    for char in text:
        if char == "'" and quote != '"':
            quote = "" if quote == "'" else "'"
        elif char == '"' and quote != "'":
            quote = "" if quote == '"' else '"'
        states.append(quote)
    return states


def _expand(text: str, ctx: Context) -> str:
    """Variables replaced by their values, quoted so that the split keeps each one a word."""
    parts, quoting, i = [], _quoting(text), 0
    while i < len(text):
        found = _VARIABLE.match(text, i) if quoting[i] != "'" else None
        if found is None:
            parts.append(text[i])
            i += 1
            continue
        name = found[1] or found[2]
        value = str(ctx.status) if found[3] else ctx.env.get(name or "", "")
        escaped = re.sub(r'(["\\$`])', r"\\\1", value)
        parts.append(escaped if quoting[i] else shlex.quote(value))
        i = found.end()
    return "".join(parts)


def _commands(line: str) -> list[tuple[str, str]]:
    """The line's simple commands, each with what joins it to the one before."""
    found, joiner, start, i, quoting = [], ";", 0, 0, _quoting(line)
    while i < len(line):
        sign = line[i : i + 2] if line[i : i + 2] in ("&&", "||") else line[i]
        if quoting[i] or sign not in (";", "&&", "||"):
            i += 1
            continue
        found.append((joiner, line[start:i]))
        joiner, i = sign, i + len(sign)
        start = i
    return [*found, (joiner, line[start:])]


def _beyond(command: str) -> bool:
    """Whether `command` needs more sh than the few words (a pipe, `&`, `$(…)`, `<`, control
    flow): refused loudly rather than misread."""
    quoting = _quoting(command)
    bare = "".join(c if not q else " " for c, q in zip(command, quoting, strict=True))
    words = bare.split()
    return any(sign in bare.replace(">&", "") for sign in ("|", "&", "`", "(", "<")) or (
        words[:1] != [] and words[0] in _CONTROL
    )


async def run_script(text: str, ctx: Context) -> int:
    """Run `text` line by line; its exit status is the last command's, or `exit`'s."""
    try:
        for line in text.replace(_EITHER_SHELL, "sh").splitlines():
            if line.lstrip().startswith("#"):
                continue
            for joiner, command in _commands(line):
                if _beyond(command):
                    ctx.err(f"sh: not in the fake's few words of sh: {command.strip()}\n".encode())
                    ctx.status = 2
                elif command.strip() and (joiner == ";" or (joiner == "&&") == (ctx.status == 0)):
                    lexer = shlex.shlex(_expand(command, ctx), posix=True, punctuation_chars=">&")
                    lexer.whitespace_split = True
                    ctx.status = await _simple(list(lexer), ctx)
    except Exit as done:
        ctx.status = done.status
    return ctx.status


async def _simple(words: list[str], ctx: Context) -> int:
    """One command with its redirections."""
    argv: list[str] = []
    out = ctx.out
    tokens = iter(words)
    for word in tokens:
        if word in (">", ">>"):
            target = ctx.files.norm(next(tokens, ""), ctx.cwd)
            try:
                ctx.files.write(target, b"", append=word == ">>")
            except OSError as exc:
                ctx.err(f"sh: 1: cannot create {target}: {exc.strerror}\n".encode())
                return 2
            out = _appender(ctx.files, target)
        elif word == ">&":
            out = ctx.err if next(tokens, "") == "2" else ctx.out
        else:
            argv.append(word)
    return await _program(argv, replace(ctx, out=out)) if argv else 0


def _appender(files: FakeFiles, path: str) -> Callable[[bytes], None]:
    return lambda data: files.write(path, data, append=True)


async def _program(argv: list[str], ctx: Context) -> int:
    name, args = argv[0], argv[1:]
    if name in _SHELLS and args:
        return await _child(args[0], ctx)
    if name in ("true", ":"):
        return 0
    if name == "false":
        return 1
    if name == "exit":
        raise Exit(int(args[0]) & 0xFF if args else ctx.status)
    if name == "echo":
        newline = args[:1] != ["-n"]
        ctx.out((" ".join(args if newline else args[1:]) + ("\n" if newline else "")).encode())
        return 0
    if name == "sleep":
        await asyncio.sleep(float(args[0]))
        return 0
    if name == "trap" and args[:1] == [""]:
        for signal in args[1:]:
            ctx.on_trap(signal)
        return 0
    if name == "pwd":
        ctx.out(f"{ctx.cwd}\n".encode())
        return 0
    if name == "id":
        said = {"-u": ctx.user[1], "-g": ctx.user[2], "-un": ctx.user[0]}.get(" ".join(args))
        ctx.out(f"{said}\n".encode())
        return 0 if said is not None else 1
    return _file_program(name, args, ctx)


def _file_program(name: str, args: list[str], ctx: Context) -> int:
    """cat, mkdir -p and rm: their errors in the words sh prints."""
    flags = "".join(a[1:] for a in args if a.startswith("-"))
    paths = [ctx.files.norm(a, ctx.cwd) for a in args if not a.startswith("-")]
    if name not in ("cat", "mkdir", "rm"):
        ctx.err(f"sh: 1: {name}: not found\n".encode())
        return 127
    status = 0
    for path in paths:
        try:
            if name == "cat":
                ctx.out(ctx.files.read(path))
            elif name == "mkdir":
                ctx.files.mkdir(path, parents="p" in flags, owner=ctx.user[1:])
            elif ctx.files.get(path) is not None or "f" not in flags:
                ctx.files.remove(path, recursive="r" in flags)
        except OSError as exc:
            ctx.err(f"{name}: {path}: {exc.strerror}\n".encode())
            status = 1
    return status


async def _child(path: str, ctx: Context) -> int:
    """`sh FILE`: the file's text in a child script (its `exit` ends only the child)."""
    try:
        text = ctx.files.read(ctx.files.norm(path, ctx.cwd)).decode(errors="replace")
    except OSError as exc:
        ctx.err(f"sh: 0: cannot open {path}: {exc.strerror}\n".encode())
        return 2
    return await run_script(text, replace(ctx, env=dict(ctx.env), status=0))


@dataclass
class ExecCall:
    """One exec handed to a handler: the text it stands in for, and its process's context."""

    command: str
    context: Context

    @property
    def env(self) -> dict[str, str]:
        """The process's environment (for the agent: with the credentials sourced)."""
        return self.context.env

    @property
    def user(self) -> str:
        return self.context.user[0]

    @property
    def workdir(self) -> str:
        return self.context.cwd

    def print(self, text: str) -> None:
        """Write to the process's standard output (where the framework sent it)."""
        self.context.out(text.encode())

    async def sh(self, command: str) -> int:
        """Run the few words of sh in this process."""
        return await run_script(command, self.context)


Handler = Callable[["FakeSandbox", ExecCall], Awaitable[int | None]]
