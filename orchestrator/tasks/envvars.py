"""Env templates in `task.toml`: `${VAR}` and `${VAR:-default}`, taken from the host.

`[environment] env`, `[verifier] env` and `[solution] env` may name host variables instead of
holding values, so a task can ask for an API key without shipping it. The semantics are
Harbor's, kept exactly:

- a value is a template only when the *whole* value is `${NAME}` or `${NAME:-default}`;
  anything else, including `http://${HOST}/x`, is passed through literally (no inline
  substitution);
- NAME is everything up to `}` or `:`; the default is everything after `:-` up to the
  final `}`;
- a variable that is set wins, even when it is set to the empty string (unlike the shell's
  `:-`); an unset one takes the default; unset without a default is an error.

Resolution happens when a trial starts, never at load time (a task is loaded on one host
and may run later); `find_env_templates` lets a caller check up front what a task needs.
Resolved values may be secrets: no message here ever contains one.

`resolve_env_templates` resolves them; its errors name the field and the variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.common.errors import TaskError

_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")  # `.` stops at a newline, as in Harbor


class EnvTemplate(BaseModel):
    """One templated env entry: where it is, which host variable it reads, its default."""

    model_config = ConfigDict(frozen=True)

    field: str  # e.g. "verifier.env.API_URL"
    variable: str  # the host variable, e.g. "API_URL"
    default: str | None = None  # None: the variable must be set

    def is_missing(self, environ: Mapping[str, str]) -> bool:
        """True when resolving this entry against `environ` would fail."""
        return self.default is None and self.variable not in environ


def parse_template(value: str) -> tuple[str, str | None] | None:
    """(variable, default) when the whole of `value` is a template, else None."""
    match = _TEMPLATE.fullmatch(value)
    return None if match is None else (match.group(1), match.group(2))


def find_env_templates(values: Mapping[str, str], *, field: str) -> list[EnvTemplate]:
    """The templated entries of one env table (`field` is its name, e.g. "verifier.env")."""
    found = []
    for key, value in values.items():
        parsed = parse_template(value)
        if parsed is not None:
            found.append(EnvTemplate(field=f"{field}.{key}", variable=parsed[0], default=parsed[1]))
    return found


def missing_message(source: Path, missing: list[EnvTemplate]) -> str:
    """One error text for every unset variable: file, field and variable; never a value."""
    parts = [
        f"{item.field} needs the host environment variable {item.variable}, which is not set"
        for item in missing
    ]
    names = ", ".join(dict.fromkeys(item.variable for item in missing))
    return (
        f"{source}: {'; '.join(parts)}. Set {names} in the environment trialbox runs in, or "
        "give a default in task.toml as ${NAME:-default}"
    )


def resolve_env_templates(
    values: Mapping[str, str],
    *,
    field: str,
    source: Path,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """`values` with every template replaced from `environ` (os.environ by default).

    Raises TaskError naming `source` (the task.toml), each field (`field` + key, e.g.
    `verifier.env.API_URL`) and each variable that is unset and has no default; all of them
    at once, and without any value in the message.
    """
    host = os.environ if environ is None else environ
    missing = [t for t in find_env_templates(values, field=field) if t.is_missing(host)]
    if missing:
        raise TaskError(missing_message(source, missing))
    resolved = {}
    for key, value in values.items():
        parsed = parse_template(value)
        if parsed is None:
            resolved[key] = value
        else:
            name, default = parsed
            resolved[key] = host[name] if name in host else str(default)
    return resolved
