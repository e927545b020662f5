"""Helpers of the fault tests: `trialbox run` as a process, the job line it prints, waits
bounded by a deadline, and what the engine did for one owner or job."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors

from tests.conftest import BASE_IMAGE, OFFICIAL_IMAGE, REPO_ROOT

T = TypeVar("T")
MAPPING = ["--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}"]
JOB_LINE = re.compile(
    r"^job (?P<job>\S+), owner (?P<owner>\S+) — trialbox reap --job (?P<reap>\S+) removes its "
    r"leftovers$",
    re.MULTILINE,
)


def trialbox(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`trialbox ARGS` from the repo root, to the end, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip


class RunProcess:
    """A `trialbox run` started in its own session, its output going to files."""

    def __init__(self, args: list[str], logs: Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.stdout_path, self.stderr_path = logs / "stdout.txt", logs / "stderr.txt"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", "run", *args],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env={**os.environ, "COLUMNS": "250"}, start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        out = self.stdout_path.read_text(errors="replace")
        err = self.stderr_path.read_text(errors="replace")
        return f"--- stdout\n{out}\n--- stderr\n{err}"

    def job_line(self, within: float = 60) -> re.Match[str]:
        """The `job …, owner …` line on stderr, which comes before any trial starts."""

        def found() -> re.Match[str] | None:
            self._check_alive()
            return JOB_LINE.search(self.stderr_path.read_text(errors="replace"))

        return wait_for(found, within, what=f"the job line\n{self.output()}")

    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"trialbox run exited with {self.process.returncode}\n"
                                 f"{self.output()}")  # fmt: skip

    def wait(self, within: float) -> int:
        try:
            return self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"trialbox run still runs after {within} s\n{self.output()}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def wait_for(probe: Callable[[], T | None], within: float, *, what: str, every: float = 0.2) -> T:
    """`probe()`'s first truthy answer, or an AssertionError after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(every)


def job_containers(client: docker.DockerClient, owner: str, job: str) -> list[Any]:
    """The trial containers of one job of one owner, running or not."""
    labels = ["trialbox.trial", f"trialbox.owner={owner}", f"trialbox.job={job}"]
    for _ in range(10):
        try:
            return client.containers.list(ignore_removed=True, all=True, filters={"label": labels})
        except docker.errors.NotFound:  # one went away between the list and its inspect
            time.sleep(0.05)
    return client.containers.list(ignore_removed=True, all=True, filters={"label": labels})


def created_since(client: docker.DockerClient, since: float, owner: str) -> list[str]:
    """Names of the containers labelled with `owner` that the engine created since `since`
    (from its event log: one created and removed again meanwhile is seen too)."""
    events = client.events(
        since=f"{since - 0.5:.6f}", until=f"{time.time():.6f}", decode=True,
        filters={"type": "container", "event": "create", "label": f"trialbox.owner={owner}"},
    )  # fmt: skip
    return [e["Actor"]["Attributes"].get("name", "?") for e in events]


def within(seconds: float, call: Callable[[], T]) -> T:
    """`call()`'s answer or exception, failing the test if it takes longer than `seconds`.

    It runs in a daemon thread, so a call that blocks for good (an open() of a FIFO) fails
    the test instead of hanging the session.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"still blocked after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
