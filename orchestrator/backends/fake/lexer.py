"""Splitting a command list as `sh` does: `;`, newlines, `&&`, `||`, comments, with quotes
(`'…'`, `"…"`, backslash) and `$(…)` kept whole.

Pipes and background jobs are refused with a `ShellSyntaxError`, so a test that leans on
them fails loudly instead of silently doing something else. Each command of the list is
read into words by `words.py`.
"""

from __future__ import annotations


class ShellSyntaxError(ValueError):
    """A command line the fake shell cannot read."""


def end_of_single(text: str, i: int) -> int:
    end = text.find("'", i + 1)
    if end < 0:
        raise ShellSyntaxError("unterminated '")
    return end


def end_of_double(text: str, i: int) -> int:
    """Index of the `"` closing the one at `i`."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text.startswith("$(", j):
            j = end_of_sub(text, j + 1) + 1
        elif text[j] == '"':
            return j
        else:
            j += 1
    raise ShellSyntaxError('unterminated "')


def end_of_sub(text: str, i: int) -> int:
    """Index of the `)` closing the `(` at `i`."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            j = end_of_single(text, j)
        elif c == '"':
            j = end_of_double(text, j)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise ShellSyntaxError("unterminated $(")


def split_list(text: str) -> list[list[tuple[str, str]]]:
    """The and-or chains of a command list, each a list of (operator before it, command):
    `a && b; c` is `[[("", "a"), ("&&", "b")], [("", "c")]]`."""
    chains: list[list[tuple[str, str]]] = []
    chain: list[tuple[str, str]] = []
    current: list[str] = []
    op = ""

    def finish(next_op: str, end_chain: bool) -> None:
        nonlocal op, chain
        raw = "".join(current).strip()
        current.clear()
        if raw:
            chain.append((op, raw))
        elif op or next_op:
            raise ShellSyntaxError(f"a command is missing around {op or next_op}")
        op = next_op
        if end_chain and chain:
            chains.append(chain)
            chain = []

    i = 0
    while i < len(text):
        c = text[i]
        at_word_start = not current or current[-1][-1:].isspace()
        if c == "\\":
            current.append(text[i : i + 2])
            i += 2
            continue
        if c == "'" or c == '"' or text.startswith("$(", i):
            end = {"'": end_of_single, '"': end_of_double}.get(c, end_of_sub)(
                text, i if c in "'\"" else i + 1
            )
            current.append(text[i : end + 1])
            i = end + 1
            continue
        if c == "#" and at_word_start:
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        if text.startswith("&&", i) or text.startswith("||", i):
            finish(text[i : i + 2], end_chain=False)
            i += 2
            continue
        if c in ";\n":
            finish("", end_chain=True)
            i += 1
            continue
        if c == "|" or (c == "&" and not text[:i].endswith(">")):
            raise ShellSyntaxError(f"{c!r} (pipes and background jobs) is not in the vocabulary")
        current.append(c)
        i += 1
    finish("", end_chain=True)
    return chains
