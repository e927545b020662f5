"""Helpers of the scenario tests: the `trialbox` command as a subprocess, a real `trialbox
serve` process, and reading the CLI's tables.

Everything here talks to the product only through its command line and its HTTP API, so the
scenarios survive a reorganisation of the package's modules.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import BASE_IMAGE, OFFICIAL_IMAGE, REPO_ROOT, write_task

TERMINAL = {"success", "failure", "cancelled"}
MAPPING = ["--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}"]
# Wide enough that rich never wraps a table cell (a subprocess has no terminal to ask).
WIDE = {"COLUMNS": "250"}


def trialbox(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`trialbox ARGS` from the worktree root, as a user runs it, with its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env={**os.environ, **WIDE},
    )  # fmt: skip


def table_rows(output: str) -> list[list[str]]:
    """The body rows of the rich tables in `output`, as lists of stripped cells."""
    rows = []
    for line in output.splitlines():
        if line.startswith("│") and line.rstrip().endswith("│"):
            rows.append([cell.strip() for cell in line.strip()[1:-1].split("│")])
    return rows


def row_of(output: str, first_cell_prefix: str) -> list[str]:
    """The one table row whose first cell starts with `first_cell_prefix`."""
    found = [r for r in table_rows(output) if r[0].startswith(first_cell_prefix)]
    assert len(found) == 1, f"expected one row for {first_cell_prefix!r}:\n{output}"
    return found[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServeProcess:
    """A running `trialbox serve` on 127.0.0.1 and an HTTP client for it."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.log = log
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, within: float = 60) -> None:
        deadline = time.monotonic() + within
        while True:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"serve exited with {self.process.returncode}:\n{self.output()}"
                )
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"serve did not answer within {within} s:\n{self.output()}")
            time.sleep(0.1)

    def submit(self, rollout_id: str, **fields: Any) -> None:
        response = self.http.post("/rollouts", json={"rollout_id": rollout_id, **fields})
        assert response.status_code == 202, response.text
        assert response.json() == {"rollout_id": rollout_id, "status": "queued"}

    def status(self, rollout_id: str) -> dict[str, Any]:
        response = self.http.get(f"/rollouts/{rollout_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def until_final(self, rollout_id: str, within: float = 180) -> dict[str, Any]:
        """The status document once it is terminal and settled (has finished_at)."""
        deadline = time.monotonic() + within
        while True:
            doc = self.status(rollout_id)
            if doc["status"] in TERMINAL and doc["finished_at"] is not None:
                return doc
            if time.monotonic() > deadline:
                raise AssertionError(f"{rollout_id} is still {doc['status']!r} after {within} s")
            time.sleep(0.1)

    def stop(self, sig: signal.Signals, within: float = 60) -> int:
        """Send `sig` and wait (bounded) for the process to exit; its exit code."""
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"serve still runs {within} s after {sig.name}:\n{self.output()}"
            ) from None


@contextmanager
def serve(*args: str, log_dir: Path) -> Iterator[ServeProcess]:
    """`trialbox serve ARGS --host 127.0.0.1 --port <free>`, answering; killed on the way out."""
    port = free_port()
    log = log_dir / f"serve-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve", *args,
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = ServeProcess(process, port, log)
    try:
        server.wait_ready()
        yield server
    finally:
        server.http.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


# Each task of the dataset scores its own reward, so a reward says which task's verifier ran.
DATASET_REWARDS = {"alpha": 0.125, "beta": 0.25, "gamma": 0.5}


def write_dataset(root: Path) -> Path:
    """A folder of three tasks (alpha, beta, gamma) whose verifiers write distinct rewards."""
    for name, reward in DATASET_REWARDS.items():
        write_task(root, name, test_sh=f"#!/bin/sh\necho {reward} > /logs/verifier/reward.txt\n")
    return root
