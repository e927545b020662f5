"""Looking at a container from outside: its health by the engine's account, and stopping
its processes without running anything inside it.

Both work when nothing can run inside the container (every pid taken, the memory full):
the engine's event log says whether the container ran out of memory, died on its own or was
killed by someone through the engine; the host's /proc reaches its processes directly.

`health_blocking` reads the state, the engine's events and the pid count;
`stop_all_from_host_blocking` sends SIGKILL through the host's `/proc`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import docker.errors

from orchestrator.backends.docker import api as docker_api
from orchestrator.sandbox import Health
from orchestrator.sandbox.commands import KEEPALIVE_SLEEP

HOST_STOP_ROUNDS = 20  # a fork loop may refill what was freed: kill again, a bounded number


def health_blocking(container_id: str, since: float, pids: bool) -> Health:
    """The engine's account of the container since `since` (its creation, epoch seconds)."""
    api = docker_api.docker_client().api
    try:
        state = api.inspect_container(container_id).get("State") or {}
    except docker.errors.NotFound:
        return Health(exists=False, running=False, stopped_outside=_removed_by_engine(
            container_id, since))  # fmt: skip
    events = list(
        api.events(
            since=f"{since - 1:.6f}", until=f"{time.time():.6f}",
            filters={"container": container_id, "type": "container"}, decode=True,
        )
    )  # fmt: skip
    actions = [e.get("Action", "") for e in events]
    died = "die" in actions
    killed = any(a == "kill" or a.startswith("kill") for a in actions)
    health = Health(
        running=bool(state.get("Running")),
        oom_kills=actions.count("oom") + (1 if state.get("OOMKilled") else 0),
        died_inside=died and not killed,
        stopped_outside=killed,
    )
    if pids and health.running:
        counted = _pids_from_cgroup(state.get("Pid"), container_id)
        if counted is None:  # not local: the engine's stats (about a second)
            pid_stats = api.stats(container_id, stream=False).get("pids_stats") or {}
            health.pids_current, health.pids_limit = (
                pid_stats.get("current"),
                pid_stats.get("limit"),
            )
        else:
            health.pids_current, health.pids_limit = counted
    return health


# What a container that nothing ran in never shows in its events (`pristine_blocking`).
_UNFIT_ACTIONS = ("exec_create", "exec_start", "die", "kill", "oom", "stop", "pause", "restart")


def pristine_blocking(container_id: str, since: float) -> bool:
    """Whether the container runs and, by the engine's events since `since` (its creation,
    epoch seconds), nothing ran in it and nothing stopped or killed it."""
    api = docker_api.docker_client().api
    try:
        state = api.inspect_container(container_id).get("State") or {}
    except docker.errors.NotFound:
        return False
    if not state.get("Running") or state.get("OOMKilled"):
        return False
    events = api.events(
        since=f"{since - 1:.6f}", until=f"{time.time():.6f}",
        filters={"container": container_id, "type": "container"}, decode=True,
    )  # fmt: skip
    actions = [str(e.get("Action", "")) for e in events]
    return not any(action.startswith(_UNFIT_ACTIONS) for action in actions)


def _pids_from_cgroup(init: int | None, container_id: str) -> tuple[int, int] | None:
    """(current, max) from the container's pids cgroup, read on this host: instant, where
    the engine's stats take a second. None when the engine is not local or it is unreadable."""
    if not init or not engine_is_local() or not _ours(init, container_id):
        return None
    try:
        folder: Path | None = None
        for line in Path(f"/proc/{init}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "pids" in controllers.split(","):  # cgroup v1
                folder = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
                break
            if controllers == "" and folder is None:  # cgroup v2 (unified)
                folder = Path("/sys/fs/cgroup") / path.lstrip("/")
        if folder is None:
            return None
        current = int((folder / "pids.current").read_text())
        limit_text = (folder / "pids.max").read_text().strip()
    except (OSError, ValueError):
        return None
    return current, (0 if limit_text == "max" else int(limit_text))


def _removed_by_engine(container_id: str, since: float) -> bool:
    api = docker_api.docker_client().api
    events = api.events(
        since=f"{since - 1:.6f}", until=f"{time.time():.6f}",
        filters={"container": container_id, "type": "container"}, decode=True,
    )  # fmt: skip
    return any(e.get("Action") in ("destroy", "kill") for e in events)


def engine_is_local() -> bool:
    """The engine runs on this host (its unix socket), so its paths and pids are ours."""
    host = os.environ.get("DOCKER_HOST", "")
    return host == "" or host.startswith("unix://")


def _ours(pid: int, container_id: str) -> bool:
    """The host process `pid` belongs to the container (its cgroup names it): never kill a
    process of this host by mistake when pids are from another namespace."""
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _keepalive(row: list[str], init: int) -> bool:
    """A `ps` row (pid, ppid, stat, args) that is PID 1's own sleep (see KEEPALIVE)."""
    return int(row[1]) == init and row[3] == KEEPALIVE_SLEEP


def stop_all_from_host_blocking(container_id: str) -> bool:
    """SIGKILL every process of the container but its PID 1, from the host; True once only
    PID 1 is left. False when the engine is not local (its pids are not ours to signal)."""
    if not engine_is_local():
        return False
    api = docker_api.docker_client().api
    init = (api.inspect_container(container_id).get("State") or {}).get("Pid")
    if not init or not _ours(init, container_id):
        return False
    for _ in range(HOST_STOP_ROUNDS):
        listed = api.top(container_id, ps_args="-o pid,ppid,stat,args").get("Processes") or []
        # Zombies hold a pid until PID 1 reaps them (it does, at once): not ours to kill.
        others = [
            row for row in listed
            if len(row) > 3 and int(row[0]) != init and not row[2].startswith("Z")
        ]  # fmt: skip
        # PID 1's own sleep comes back as soon as it is killed: it does not count as left.
        if all(_keepalive(row, init) for row in others):
            return True
        for pid in (int(row[0]) for row in others):
            if _ours(pid, container_id):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                except PermissionError:  # not root on this host: the relay fails closed
                    return False
        time.sleep(0.05)
    return False
