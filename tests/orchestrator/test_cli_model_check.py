"""`trialbox run` checks the model before any trial or job folder (the fake backend: no engine).

A shell agent without a model, or a model URL nothing answers on, used to fail each trial one
by one (the URL only after the gateway's retries); now the run stops at once, saying what to
fix, and the summary table shows a trial's failure reason whole.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.cli.model_check import probe_model_url
from tests.conftest import REPO_ROOT, write_task
from tests.support.standin import StandInThread


def trialbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip


def run_fake(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    task = tmp_path / "tasks" / "t"
    if not task.exists():
        write_task(tmp_path / "tasks", "t")
    return trialbox(
        "run", str(task), "--backend", "fake", "--jobs-dir", str(tmp_path / "jobs"), *args
    )


def job_folders(tmp_path: Path) -> list[Path]:
    jobs = tmp_path / "jobs"
    return list(jobs.iterdir()) if jobs.exists() else []


@pytest.fixture
def closed_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (a port just bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_an_agent_that_needs_a_model_without_one_is_refused_before_any_folder(
    tmp_path: Path,
) -> None:
    done = run_fake(tmp_path, "--agent", "shell")
    assert done.returncode == 1
    message = " ".join(done.stdout.split())
    assert "--agent shell needs a model: give --model NAME and --model-url URL" in message
    assert "job file keys model and model_url" in message
    assert job_folders(tmp_path) == []


def test_a_model_url_that_does_not_answer_is_refused_before_any_folder(
    tmp_path: Path, closed_url: str
) -> None:
    done = run_fake(tmp_path, "--agent", "shell", "--model", "m", "--model-url", closed_url)
    assert done.returncode == 1
    message = " ".join(done.stdout.split())
    assert f"--model-url {closed_url}: the model does not answer (GET {closed_url}/models" in (
        message
    )
    assert "ConnectError" in message and "--no-model-check" in message
    assert job_folders(tmp_path) == []


def past_the_check(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
    """The job started: its folder exists, and its trial met the fake backend's own refusal
    of a model (it cannot mount the gateway's socket), not the model check's."""
    assert "does not answer" not in done.stdout + done.stderr
    (job,) = job_folders(tmp_path)
    (result,) = job.glob("*/result.json")
    assert "cannot mount the model gateway" in json.loads(result.read_text())["error"]["message"]


def test_the_check_is_skipped_with_the_flag(tmp_path: Path, closed_url: str) -> None:
    done = run_fake(
        tmp_path, "--agent", "nop", "--model", "m", "--model-url", closed_url, "--no-model-check"
    )
    past_the_check(tmp_path, done)


def test_a_standin_url_passes_with_one_request(tmp_path: Path) -> None:
    with StandInThread() as upstream:
        done = run_fake(
            tmp_path, "--agent", "nop", "--model", "m", "--model-url", upstream.base_url
        )
        seen = [(r.method, r.path) for r in upstream.requests]
    assert seen == [("GET", "/v1/models")]
    past_the_check(tmp_path, done)


class _Status(BaseHTTPRequestHandler):
    """Answers GET /<status>/models with that status."""

    def do_GET(self) -> None:
        self.send_response(int(self.path.split("/")[1]))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def status_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("status", [200, 401, 403, 404])
def test_any_answer_below_500_means_the_model_answers(status_server: str, status: int) -> None:
    probe_model_url(f"{status_server}/{status}")


def test_a_server_error_is_refused_with_its_status(status_server: str) -> None:
    with pytest.raises(ValueError, match=r"/503/models: it answered 503\)"):
        probe_model_url(f"{status_server}/503")


def test_a_url_that_accepts_but_never_answers_is_refused_when_the_time_is_up() -> None:
    with socket.socket() as silent:  # listens, never accepts: the request waits for nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(
            ValueError, match=re.escape(f"GET {url}/models: no answer within 0.2 s")
        ):
            probe_model_url(url, timeout_sec=0.2)


def test_the_summary_table_shows_the_whole_failure_reason(tmp_path: Path) -> None:
    write_task(tmp_path / "tasks", "t", test_sh="#!/bin/sh\necho looked but wrote nothing\n")
    done = run_fake(tmp_path, "--agent", "nop")
    (job,) = job_folders(tmp_path)
    (result,) = job.glob("*/result.json")
    message = json.loads(result.read_text())["error"]["message"]
    assert len(message) > 80, "a reason the old table cut"
    # The error column of every line of the table, read back into one text.
    rows = [line.split("│") for line in done.stdout.splitlines() if line.startswith("│")]
    shown = " ".join(row[5].strip() for row in rows if len(row) == 8)
    assert shown == f"validation: {message}"
