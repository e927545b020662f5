"""The shell launcher that makes the subject a process-group leader with a known pid.

A `docker exec`'d process is already its own session and group leader (pid = pgid = sid), so
the launcher records its own `$$` and then `exec`s the subject: same pid, same group, no fork
(`setsid` would fork a new leader the relay could not see exit). Credentials arrive in a 0600
env file that is sourced and deleted before the subject starts, so they never appear in a
command line or in the container's environment. The subject's output goes to files, so a
background child holding a pipe cannot delay the exec's end.

`launcher_script` is the launcher (exit 125 with the `SCOPE_MARKER` when it cannot write the pid
file or read the env file); `leader_probe_script` the probe that finds the leader in /proc when
a signal is needed, so a rewritten pid file cannot misdirect one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

SCOPE_UNAVAILABLE_EXIT = 125
SCOPE_MARKER = "trialbox-relay:scope-unavailable"
# Where the pid files go unless the supervisor is told otherwise; a trial's /logs skeleton
# has it already, so the launcher starts no `mkdir`.
STATE_DIR = "/logs/agent/.relay"


@dataclass(frozen=True)
class LaunchPaths:
    """Per-launch file names; the nonce keeps launches apart and makes the marker unguessable."""

    state_dir: str
    nonce: str
    stdout: str
    stderr: str

    @property
    def pid_file(self) -> str:
        return f"{self.state_dir}/subject-{self.nonce}.pid"

    @property
    def env_file(self) -> str:
        # /tmp exists in every image and is writable by any user; the file itself is 0600.
        return f"/tmp/.trialbox-env-{self.nonce}"

    @property
    def scope_marker(self) -> str:
        return f"{SCOPE_MARKER}:{self.nonce}"


def env_file_text(env: Mapping[str, str]) -> bytes:
    """Shell assignments, each value quoted; sourced under `set -a` so they are exported."""
    lines = []
    for name, value in env.items():
        if not name.isidentifier():
            raise ValueError(f"credential name {name!r} is not a valid environment variable name")
        lines.append(f"{name}={shlex.quote(value)}\n")
    return "".join(lines).encode()


def launcher_script(paths: LaunchPaths, subject: str, *, has_env: bool) -> str:
    """The `sh` program run by the subject's exec."""
    q = shlex.quote
    env_file = q(paths.env_file)
    lines = [
        # The state folder is usually there (the trial's skeleton has it): no `mkdir` then.
        f"if ! {{ {{ [ -d {q(paths.state_dir)} ] || mkdir -p {q(paths.state_dir)}; }}"
        f" && echo $$ > {q(paths.pid_file)}; }} 2>/dev/null;"
        f" then rm -f {env_file}; echo {q(paths.scope_marker)} >&2;"
        f" exit {SCOPE_UNAVAILABLE_EXIT}; fi",
    ]
    if has_env:
        lines += [
            f"if [ ! -r {env_file} ]; then rm -f {env_file} 2>/dev/null;"
            f" echo {q(paths.scope_marker)} >&2; exit {SCOPE_UNAVAILABLE_EXIT}; fi",
            f"set -a; . {env_file}; set +a; rm -f {env_file}",
        ]
    lines += [
        f"exec >{q(paths.stdout)} 2>{q(paths.stderr)} </dev/null",
        f"exec sh -c {q(subject)}",
    ]
    return "\n".join(lines)


def leader_probe_script(paths: LaunchPaths) -> str:
    """Prints the subject leader's pid, checked: a process started by `docker exec` (its
    parent is outside the container, so PPid is 0), not init, not this probe nor the
    `timeout` wrapper that may run it.

    The pid file is the first guess; a subject can rewrite it, so when the guess fails the
    check the probe looks for the one process that passes it. None, or two: no answer.
    """
    return "\n".join(
        [
            "is_leader() {",
            '  case "$1" in ""|*[!0-9]*) return 1;; esac',
            '  [ "$1" -gt 1 ] && [ "$1" != "$$" ] && [ "$1" != "$PPID" ] || return 1',
            '  [ -r "/proc/$1/status" ] || return 1',
            "  while read -r key value _; do",
            '    [ "$key" = PPid: ] && { [ "$value" = 0 ]; return; }',
            '  done < "/proc/$1/status"',
            "  return 1",
            "}",
            f"pid=$(cat {shlex.quote(paths.pid_file)} 2>/dev/null)",
            'if is_leader "$pid"; then echo "$pid"; exit 0; fi',
            'found=""',
            "for dir in /proc/[0-9]*; do",
            "  candidate=${dir#/proc/}",
            '  is_leader "$candidate" || continue',
            '  [ -z "$found" ] || exit 3',
            "  found=$candidate",
            "done",
            '[ -n "$found" ] && echo "$found"',
        ]
    )
