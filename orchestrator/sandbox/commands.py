"""trialbox's own in-sandbox commands as values: each says what it asks, renders itself to
POSIX sh (`shell()`, what a backend runs under `sh -c`: Docker and the fake), and, for a test
double that answers by kind without a shell, says what that shell would print.

The relay's commands (`relay.commands`: the launcher, the leader probe, signals, the group
check, user ids) are the same kind of value; everything here is the framework's own steps:
`CheckRuntime` (does the runtime's interpreter start), `PrepareVerifier` (the root exec that
puts the framework's paths back before the verifier), `RunVerifier` (tests/test.sh and the
reward files' snapshot right after it; `PrepareAndVerify` is the two as one exec),
`StartForwarder` (the model gateway's forwarder) and `PathExists`. A task's own text (its
healthcheck, an agent's command) stays a plain string. `SandboxCommand` is what an exec takes;
`shell_of` renders either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from container_runtime import paths
from container_runtime.paths import RUNTIME_CHECK, RUNTIME_PYTHON
from relay.protocol import Command

SandboxCommand = str | Command


def shell_of(command: SandboxCommand) -> str:
    """The sh text of a command: a string is already sh."""
    return command if isinstance(command, str) else command.shell()


def timeout_argv(timeout: float, kill_after: float) -> list[str]:
    """`timeout` bounding what follows it by `timeout` seconds (exit 124 on TERM, 137 after
    the KILL's grace `kill_after`)."""
    return ["timeout", "-k", f"{kill_after:g}", f"{timeout:.3f}"]


def bounded_command(command: str, timeout: float | None, kill_after: float) -> list[str]:
    """The argv that runs `command` under `sh -c`, bounded by `timeout` seconds inside the
    sandbox (`timeout_argv`): every backend's."""
    bound = [] if timeout is None else timeout_argv(timeout, kill_after)
    return [*bound, "sh", "-c", command]


def timed_out(timeout: float | None, exit_code: int | None, seconds: float) -> bool:
    """Whether a bounded command's exit was its limit's: 124/137 alone may be the command's
    own exit code; only one that came as the limit ran out is the timeout's."""
    return timeout is not None and exit_code in (124, 137) and seconds >= timeout


KEEPALIVE_SLEEP = "sleep 2147483647"  # PID 1's child: see KEEPALIVE
# The command of every sandbox (the image's ENTRYPOINT is kept, as Harbor keeps it; most
# entrypoints end in `exec "$@"`, so this becomes PID 1). Plain `sh`, so any image with a
# shell runs: it ignores every signal it can (and the kernel drops SIGKILL sent to PID 1
# from inside), so an agent, even as root, cannot stop its own sandbox with `kill 1`; and
# while it waits for its sleep, the shell's wait reaps every child, orphans included, so
# zombies never hold the pids an agent needs. The engine's SIGKILL (removal) still ends it.
KEEPALIVE = (
    f"trap '' HUP INT QUIT PIPE ALRM TERM USR1 USR2; while :; do {KEEPALIVE_SLEEP} & wait $!; done"
)


REWARD_FILES = ("reward.json", "reward.txt")
# A reward file holds a few numbers: the snapshot carries at most this much of each.
SNAPSHOT_CAP = 64 * 1024
NOT_A_FILE = "other"  # what the snapshot says of a path that is there but no regular file
VERIFIER_STDOUT = f"{paths.VERIFIER_DIR}/test-stdout.txt"
FOUND = "trialbox-found: "
STOPPED = "trialbox-stopped: "
# The agent's leftover processes, SIGKILLed from a root exec (only the shell's builtins, so
# it runs while most pids are taken): every process but PID 1, this shell and its `timeout`,
# in rounds until a round finds none but PID 1's own sleep (it comes back at once) or zombies.
_STOP = f"""n=0 i=0
while [ $i -lt 50 ]; do
  left=0
  for d in /proc/[0-9]*; do
    p=${{d#/proc/}}
    case $p in 1|$$|$PPID) continue;; esac
    read -r st 2>/dev/null <"$d/stat" || continue
    comm=${{st#*(}}; comm=${{comm%)*}}
    set -- ${{st##*) }}
    case $1 in Z*|X*) continue;; esac
    kill -9 "$p" 2>/dev/null || continue
    [ "$2 $comm" = "1 sleep" ] || left=$((left + 1))
  done
  [ $left -eq 0 ] && break
  n=$((n + left)) i=$((i + 1))
done
echo "{STOPPED}$n"
[ $left -eq 0 ] || echo "{FOUND}processes still starting after $i rounds of the stop"
"""
# Each path the framework relies on must be a real folder of root's with its documented mode
# (section 4 of docs/architecture.md). What is not (a symlink, a file, another owner or mode,
# missing) is reported and replaced: POSIX sh and ls only, so any image with a shell runs it.
# Mostly nothing is wrong, and each program started costs a few ms on a loaded engine: `pristine`
# tells that from one `ls` (every path as the skeleton left it, /logs/verifier empty, no
# /tests); anything it does not recognise, a locale's other date included, goes the long way.
_REPAIR = f"""found() {{ echo "{FOUND}$*"; }}
odd() {{
  if [ -L "$1" ] || {{ [ -e "$1" ] && [ ! -d "$1" ]; }}; then
    found "$1 was no folder: $(ls -ldn "$1" 2>&1)"
  else return 1
  fi
}}
fix() {{
  p=$1 want=$2 mode=$3 optional=$4
  if odd "$p"; then
    rm -f "$p" || exit 1
    optional=
  fi
  if [ ! -d "$p" ]; then
    [ -n "$optional" ] && return 0
    mkdir "$p" && chmod "$mode" "$p" || exit 1
    return 0
  fi
  set -- $(ls -ldn "$p")
  if [ "${{1%[.+@]}} $3 $4" != "$want 0 0" ]; then
    found "$p was ${{1%[.+@]}} owned by $3:$4"
    chown 0:0 "$p" && chmod "$mode" "$p" || exit 1
  fi
}}
pristine() {{
  {{ [ -e {paths.TESTS_DIR} ] || [ -L {paths.TESTS_DIR} ]; }} && return 1
  set -- {paths.LOGS_DIR} {paths.AGENT_DIR} {paths.ARTIFACTS_DIR} {paths.VERIFIER_DIR}
  {{ [ -e /opt/trialbox ] || [ -L /opt/trialbox ]; }} && set -- "$@" /opt/trialbox
  out=$(ls -ldn "$@" 2>/dev/null) || return 1
  n=0
  while read -r m _ u g _ _ _ _ p extra; do
    [ -z "$extra" ] || return 1
    case "${{m%[.+@]}} $u $g $p" in
      "drwxr-xr-x 0 0 {paths.LOGS_DIR}"|"drwxrwxrwx 0 0 {paths.AGENT_DIR}"|\
"drwxrwxrwx 0 0 {paths.ARTIFACTS_DIR}"|"drwxr-xr-x 0 0 {paths.VERIFIER_DIR}"|\
"drwxr-xr-x 0 0 /opt/trialbox") n=$((n + 1));;
      *) return 1;;
    esac
  done <<TRIALBOX_LS
$out
TRIALBOX_LS
  [ $n -eq $# ] || return 1
  for f in {paths.VERIFIER_DIR}/* {paths.VERIFIER_DIR}/.[!.]* {paths.VERIFIER_DIR}/..?*; do
    {{ [ -e "$f" ] || [ -L "$f" ]; }} && return 1
  done
  return 0
}}
if ! pristine; then
fix {paths.LOGS_DIR} drwxr-xr-x 0755
fix {paths.AGENT_DIR} drwxrwxrwx 0777
fix {paths.ARTIFACTS_DIR} drwxrwxrwx 0777
fix /opt/trialbox drwxr-xr-x 0755 optional
odd {paths.VERIFIER_DIR} || {{ set -- $(ls -A {paths.VERIFIER_DIR} 2>/dev/null)
  [ $# -eq 0 ] || found "{paths.VERIFIER_DIR} was not empty ($# entries: $*)"; }}
odd {paths.TESTS_DIR} || {{ [ -d {paths.TESTS_DIR} ] && found "{paths.TESTS_DIR} was there \
before the verifier's upload: $(ls -ldn {paths.TESTS_DIR})"; }}
rm -rf {paths.VERIFIER_DIR} {paths.TESTS_DIR} && mkdir {paths.VERIFIER_DIR} \
  && chmod 0755 {paths.VERIFIER_DIR} || exit 1
fi
"""  # fmt: skip


@dataclass(frozen=True)
class CheckRuntime:
    """Exit 0 when trialbox's runtime interpreter starts and imports its package."""

    def shell(self) -> str:
        return RUNTIME_CHECK


@dataclass(frozen=True)
class PrepareVerifier:
    """The root exec before the verifier: the agent's leftovers stopped (when asked), the
    framework's folders repaired, `/logs/verifier` and `/tests` emptied. It prints a
    `FOUND` line per thing it put back and, when stopping, a `STOPPED` count.
    `empty_agent`: `/logs/agent` emptied too (between two steps of a multi-step task)."""

    stop_leftovers: bool = False
    remove: tuple[str, ...] = ()  # also removed (a staged folder of a one-exec try)
    empty_agent: bool = False

    def shell(self) -> str:
        agent = paths.AGENT_DIR
        empty = f"rm -rf {agent} && mkdir {agent} && chmod 0777 {agent}"
        gone = f"rm -rf {' '.join(self.remove)}" if self.remove else ""
        return "\n".join(
            [_STOP if self.stop_leftovers else "", _REPAIR, empty if self.empty_agent else "", gone]
        )

    @staticmethod
    def answer(found: list[str], stopped: int | None) -> str:
        """What the exec prints for these findings and (when it stopped) this many stopped."""
        lines = [] if stopped is None else [f"{STOPPED}{stopped}"]
        return "".join(f"{line}\n" for line in lines + [f"{FOUND}{what}" for what in found])


@dataclass(frozen=True)
class RunVerifier:
    """tests/test.sh (its output to test-stdout.txt, so its leftovers never hold this exec's
    pipe), then, in the same exec, the reward files as they stand at its exit, as hex
    behind `mark` (`trials/rewards.parse_snapshot` reads it); the exec exits as test.sh did."""

    mark: str

    def shell(self) -> str:
        return f"{self.test_sh()}\n{self.snapshot()}"

    @staticmethod
    def test_sh(limit: tuple[float, float] | None = None) -> str:
        """The line that runs tests/test.sh and keeps its exit in `rc`; under `timeout` when
        `limit` (seconds and the KILL's grace) is given."""
        bounded = "" if limit is None else " ".join(timeout_argv(*limit)) + " "
        return (
            f"{bounded}$(command -v bash || echo sh) {paths.TESTS_DIR}/test.sh "
            f">{VERIFIER_STDOUT} 2>&1 </dev/null\nrc=$?"
        )

    def snapshot(self) -> str:
        """The reward files as hex behind the mark (one `od` per file), then exit as test.sh
        did. An image without `od` prints no snapshot."""
        return (
            f"MARK={self.mark}\n"
            "if command -v od >/dev/null 2>&1; then\n"
            f"  for f in {' '.join(REWARD_FILES)}; do\n"
            f"    p={paths.VERIFIER_DIR}/$f\n"
            '    if [ -L "$p" ] || { [ -e "$p" ] && [ ! -f "$p" ]; }; then echo "$MARK $f '
            f'{NOT_A_FILE}"\n'
            '    elif [ -f "$p" ]; then echo "$MARK $f"; '
            f'od -An -v -tx1 -N {SNAPSHOT_CAP + 1} "$p"; fi\n'
            "  done\n"
            '  echo "$MARK end"\n'
            "fi\n"
            "exit $rc"
        )

    def answer(self, files: Mapping[str, bytes | None]) -> str:
        """The snapshot as the exec prints it after test.sh: for each reward file in `files`,
        its bytes (up to one past the cap) as hex, or `NOT_A_FILE` where the value is None
        (there, but no regular file); a file not in `files` was not there."""
        lines = []
        for name in REWARD_FILES:
            if name not in files:
                continue
            data = files[name]
            if data is None:
                lines.append(f"{self.mark} {name} {NOT_A_FILE}")
            else:
                lines += [f"{self.mark} {name}", data[: SNAPSHOT_CAP + 1].hex(" ")]
        return "".join(f"{line}\n" for line in [*lines, f"{self.mark} end"])


@dataclass(frozen=True)
class PrepareAndVerify:
    """`PrepareVerifier`, then the tests the host staged as `staged` (a root-only folder
    whose name no agent could guess, staged after the agent ended) put into place as
    /tests, then tests/test.sh under its own time limit (`limit`: seconds and the KILL's
    grace, as the exec's own) and `RunVerifier`'s snapshot: one root exec where there were
    three and two uploads. `PREPARED` after the run's mark ends the first part, so a prepare
    that failed is told from test.sh's exit. `hand_over`: `conversation` (beside `staged`)
    holds a trajectory.json that becomes the agent's unless the agent saved its own
    (`HANDED_OVER` says it did). `copied`: `staged` is in the sandbox's read-only slot
    folder, written there from the host (no upload): copied, not moved."""

    prepare: PrepareVerifier
    run: RunVerifier
    staged: str
    limit: tuple[float, float]
    hand_over: bool = False
    copied: bool = False  # `staged` is in a read-only mount: copy, never move

    PREPARED = "prepared"
    HANDED_OVER = "handed-over"

    @property
    def parts(self) -> tuple[PrepareVerifier, RunVerifier]:
        return self.prepare, self.run

    @property
    def conversation(self) -> str:
        """Where the host stages the conversation to hand over."""
        return self.conversation_beside(self.staged)

    @staticmethod
    def conversation_beside(staged: str) -> str:
        return f"{staged}.trajectory.json"

    def shell(self) -> str:
        mark, trajectory = self.run.mark, f"{paths.AGENT_DIR}/trajectory.json"
        put, put_file = ("cp -R", "cp") if self.copied else ("mv", "mv -f")
        unused = "" if self.copied else f"else rm -f {self.conversation}; "
        hand_over = (
            f't={trajectory}; if [ ! -e "$t" ] && [ ! -L "$t" ]; then '
            f'{put_file} {self.conversation} "$t" && echo "{mark} {self.HANDED_OVER}"; '
            f"{unused}fi\n"
            if self.hand_over
            else ""
        )
        return (
            f"{self.prepare.shell()}\n"
            # Back after the repair (a leftover's doing): not into it, the long way instead.
            f"{{ [ -e {paths.TESTS_DIR} ] || [ -L {paths.TESTS_DIR} ]; }} && exit 1\n"
            f"{put} {self.staged} {paths.TESTS_DIR} || exit 1\n{hand_over}"
            f'echo "{mark} {self.PREPARED}"\n'
            f"{self.run.test_sh(self.limit)}\n{self.run.snapshot()}"
        )

    def answer(self, prepared: str, handed_over: bool, run: str) -> str:
        """What the exec prints: the prepare's lines, the hand-over's, the marker, the run's."""
        words = [self.HANDED_OVER] if handed_over else []
        marks = "".join(f"{self.run.mark} {word}\n" for word in [*words, self.PREPARED])
        return prepared + marks + run


@dataclass(frozen=True)
class StartForwarder:
    """Start the model gateway's forwarder in the sandbox, detached, on a free loopback port
    it prints last (`port`); it carries requests to the gateway's socket at `socket`."""

    socket: str

    def shell(self) -> str:
        return (
            f"{RUNTIME_PYTHON} -m container_runtime forward --daemon "
            f"--listen 127.0.0.1:0 --to {self.socket}"
        )

    @staticmethod
    def port(output: str) -> int | None:
        last = output.strip().splitlines()[-1:]
        return int(last[0]) if last and last[0].isdigit() else None


@dataclass(frozen=True)
class PathExists:
    """Exit 0 when `path` is there (a dangling symlink too), 1 when it is not."""

    path: str

    def shell(self) -> str:
        return f"test -e {self.path} || test -L {self.path}"
