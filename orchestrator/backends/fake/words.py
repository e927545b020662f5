"""Reading one simple command into words and redirections, as `sh` does.

A word is kept as parts (literal text, `$NAME` / `${NAME}` / `$?` / `$$`, `$(…)`), each
marked quoted or not: expansion is the interpreter's (a `$(…)` runs a command, which is
async), and an unquoted empty word vanishes while a quoted one stays. Redirections are
`>`, `>>`, `<`, `2>`, `2>&1` and `>&2`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from orchestrator.backends.fake.lexer import (
    ShellSyntaxError,
    end_of_double,
    end_of_single,
    end_of_sub,
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REDIRECT = re.compile(r"([012])?(>>|>&|>|<)")


@dataclass(frozen=True)
class Part:
    """A piece of a word: literal text, a variable (`$NAME`, `$?`, `$$`) or a `$(…)`."""

    kind: Literal["text", "var", "sub"]
    value: str
    quoted: bool = False


Word = tuple[Part, ...]


@dataclass(frozen=True)
class Redirect:
    """`fd op target`: `op` is `>`, `>>`, `<`, or `>&` (whose target is an fd number)."""

    fd: int
    op: str
    target: Word


@dataclass(frozen=True)
class Command:
    """One simple command: its words (assignments first, if any) and its redirections."""

    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...]


def _read_dollar(raw: str, i: int, quoted: bool) -> tuple[Part, int]:
    if raw.startswith("$(", i):
        end = end_of_sub(raw, i + 1)
        return Part("sub", raw[i + 2 : end], quoted), end + 1
    if raw.startswith("${", i):
        end = raw.find("}", i)
        if end < 0:
            raise ShellSyntaxError("unterminated ${")
        return Part("var", raw[i + 2 : end], quoted), end + 1
    if raw[i + 1 : i + 2] in ("?", "$"):
        return Part("var", raw[i + 1], quoted), i + 2
    name = _NAME.match(raw, i + 1)
    if name:
        return Part("var", name.group(), quoted), name.end()
    return Part("text", "$", quoted), i + 1


def _read_double(raw: str, i: int, parts: list[Part]) -> int:
    """Read a "…" whose opening quote is at `i` into `parts`; returns the index after it."""
    end = end_of_double(raw, i)
    buf: list[str] = []
    j = i + 1
    count = len(parts)
    while j < end:
        if raw[j] == "\\" and raw[j + 1 : j + 2] in ('"', "\\", "$", "`"):
            buf.append(raw[j + 1])
            j += 2
        elif raw[j] == "$":
            parts.append(Part("text", "".join(buf), True))
            buf.clear()
            part, j = _read_dollar(raw, j, True)
            parts.append(part)
        else:
            buf.append(raw[j])
            j += 1
    if buf or len(parts) == count:
        parts.append(Part("text", "".join(buf), True))
    return end + 1


def _read_word(raw: str, i: int) -> tuple[Word, int]:
    parts: list[Part] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            parts.append(Part("text", "".join(buf)))
            buf.clear()

    while i < len(raw) and not raw[i].isspace() and raw[i] not in "<>":
        c = raw[i]
        if c == "\\":
            if raw[i + 1 : i + 2] != "\n":  # a backslash-newline joins lines
                buf.append(raw[i + 1 : i + 2])
            i += 2
        elif c == "'":
            end = end_of_single(raw, i)
            flush()
            parts.append(Part("text", raw[i + 1 : end], True))
            i = end + 1
        elif c == '"':
            flush()
            i = _read_double(raw, i, parts)
        elif c == "$":
            flush()
            part, i = _read_dollar(raw, i, False)
            parts.append(part)
        else:
            buf.append(c)
            i += 1
    flush()
    return tuple(parts), i


def parse_command(raw: str) -> Command:
    """The words and redirections of one simple command."""
    words: list[Word] = []
    redirects: list[Redirect] = []
    pending: tuple[int, str] | None = None
    i = 0
    while i < len(raw):
        if raw[i].isspace():
            i += 1
            continue
        match = _REDIRECT.match(raw, i)
        if match:
            if pending is not None:
                raise ShellSyntaxError(f"a redirection has no target before {match.group()!r}")
            op = match[2]
            pending = (int(match[1]) if match[1] else (0 if op == "<" else 1), op)
            i = match.end()
            continue
        word, i = _read_word(raw, i)
        if pending is not None:
            redirects.append(Redirect(pending[0], pending[1], word))
            pending = None
        else:
            words.append(word)
    if pending is not None:
        raise ShellSyntaxError("a redirection has no target")
    return Command(tuple(words), tuple(redirects))


def assignment(word: Word) -> tuple[str, Word] | None:
    """`NAME=value` as (NAME, the value's parts), when the word is an unquoted assignment."""
    if not word or word[0].kind != "text" or word[0].quoted:
        return None
    name, sep, rest = word[0].value.partition("=")
    if not sep or not _NAME.fullmatch(name):
        return None
    head = (Part("text", rest),) if rest else ()
    return name, head + word[1:]
