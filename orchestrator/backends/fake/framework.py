"""Recognising trialbox's own commands, which use more shell than the fake's vocabulary.

Two of them cannot run through the fake shell: the relay's launcher (an `if !{ …; }` block
that records `$$`, sources a credentials file, then `exec sh -c SUBJECT`) and its leader
probe (which reads /proc). The sandbox emulates both from what is parsed here. The verifier's
run line is recognised too (so a test can script the verifier instead of writing test.sh; the
reward snapshot it prints is emulated), and its prepare exec (leftovers stopped, folders put
back, `/logs/verifier` and `/tests` emptied), which uses more shell than the vocabulary.
Everything else trialbox sends (`kill`, `kill -0 -PID; echo rc=$?`, `id -u; id -g`)
is plain vocabulary. Parsing follows `relay.launcher` closely; a change
there that this misses makes the fake fail loudly, never pass silently.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from container_runtime import paths
from relay.launcher import SCOPE_MARKER

_RECORD = re.compile(r"mkdir -p (?P<dir>\S+) && echo \$\$ > (?P<pid>\S+); \}")
_MARKER = re.compile(r"echo (?P<marker>\S+) >&2")
_SOURCE = re.compile(r"^set -a; \. (?P<env>\S+); set \+a")
_PROBE_PID_FILE = re.compile(r"pid=\$\(cat (?P<pid>\S+) 2>/dev/null\)")
_VERIFIER_RUN = re.compile(
    r"^MARK=(?P<mark>\S+); CAP=(?P<cap>\d+)\n\$\(command -v bash \|\| echo sh\) "
    rf"(?P<script>{re.escape(paths.TESTS_DIR)}/test\.sh) (?P<redirects>[^\n]*)\n"
)
# The verifier's root exec before it runs (trials/verifier.prepare_script) and its report.
PREPARE_MARK = "# trialbox: prepare the verifier"
STOPPED = "trialbox-stopped: "
FOUND = "trialbox-found: "
SUBJECT_PREFIX = "exec sh -c "


def _word(text: str) -> str:
    return shlex.split(text)[0]


@dataclass(frozen=True)
class Launch:
    """The relay's launcher script, taken apart."""

    state_dir: str
    pid_file: str
    env_file: str | None
    marker: str
    redirects: str  # `exec >stdout 2>stderr </dev/null`: plain vocabulary
    subject: str


def parse_launch(command: str) -> Launch | None:
    """The launcher's parts, or None when `command` is not the relay's launcher."""
    if SCOPE_MARKER not in command:
        return None
    lines: list[str] = []
    rest = command
    while not rest.startswith(SUBJECT_PREFIX):
        line, newline, rest = rest.partition("\n")
        if not newline:
            return None
        lines.append(line)
    record = _RECORD.search(lines[0])
    marker = _MARKER.search(lines[0])
    if record is None or marker is None or not lines[-1].startswith("exec >"):
        return None
    source = next((m for line in lines if (m := _SOURCE.match(line))), None)
    return Launch(
        state_dir=_word(record["dir"]),
        pid_file=_word(record["pid"]),
        env_file=None if source is None else _word(source["env"]),
        marker=_word(marker["marker"]),
        redirects=lines[-1],
        subject=shlex.split(rest)[3],
    )


def parse_probe(command: str) -> str | None:
    """The pid file the relay's leader probe reads, or None when it is not the probe."""
    if not command.startswith("is_leader() {"):
        return None
    found = _PROBE_PID_FILE.search(command)
    return None if found is None else _word(found["pid"])


@dataclass(frozen=True)
class VerifierRun:
    """The verifier's run line: its redirections (vocabulary), the script it runs, and the
    mark and cap of the reward snapshot it prints after the script exits."""

    redirects: str
    script: str
    mark: str
    cap: int


def parse_verifier_run(command: str) -> VerifierRun | None:
    found = _VERIFIER_RUN.match(command)
    if found is None:
        return None
    return VerifierRun(
        f"exec {found['redirects']}", found["script"], found["mark"], int(found["cap"])
    )


def parse_prepare(command: str) -> bool | None:
    """Whether the verifier's prepare exec stops the leftovers; None when it is not it."""
    if not command.startswith(PREPARE_MARK):
        return None
    return STOPPED in command


def parse_env_file(text: str) -> dict[str, str]:
    """The credentials file the launcher sources: `NAME='value'` assignments, quoted by
    `shlex.quote` (values may span lines)."""
    pairs = (item.partition("=") for item in shlex.split(text))
    return {name: value for name, _, value in pairs}
