"""`trialbox view` and `trialbox export` as a user runs them."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from orchestrator.cli import main
from tests.conftest import REPO_ROOT
from tests.report.helpers import fake_job


async def test_view_out_writes_one_self_contained_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = await fake_job(tmp_path, passing=1, failing=1)
    out = tmp_path / "report.html"

    code = main(["view", str(tmp_path / "jobs"), "--out", str(out)])

    assert code == 0
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and html.endswith("</html>")
    assert all(t.trial_id in html for t in job.trials)
    assert f"wrote {out}" in capsys.readouterr().out


def test_view_of_a_folder_without_jobs_says_what_it_wants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["view", str(tmp_path), "--out", str(tmp_path / "r.html")])

    assert code == 1
    assert "no job here; give a job folder" in capsys.readouterr().out
    assert not (tmp_path / "r.html").exists()


async def test_view_on_a_port_in_use_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await fake_job(tmp_path, passing=1, failing=0)
    from orchestrator.report.server import ReportServer

    with ReportServer([tmp_path], port=0) as taken:
        port = taken.server_address[1]
        code = main(["view", str(tmp_path / "jobs"), "--port", str(port)])

    assert code == 1
    assert f"port {port} is in use: give another with --port" in capsys.readouterr().out


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_view_serves_until_stopped_and_leaves_nothing_running(
    tmp_path: Path, stop: signal.Signals
) -> None:
    job = asyncio.run(fake_job(tmp_path, passing=1, failing=0))
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "view", str(tmp_path / "jobs"), "--port", "0"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"the report is at (http://127\.0\.0\.1:\d+/)", line)
        assert found, line
        with urllib.request.urlopen(found.group(1), timeout=10) as answer:
            assert job.trials[0].trial_id in answer.read().decode()
        process.send_signal(stop)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "stopped" in process.stdout.read()
