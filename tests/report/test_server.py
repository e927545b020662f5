"""The served report: bound to 127.0.0.1, read from disk on every request, a small JSON
endpoint that changes when a trial starts or ends, trial details on demand."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.report.server import ReportServer, serving
from tests.report.helpers import fake_job, run_holding, trial_of


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_server_binds_this_machine_only_by_default(tmp_path: Path) -> None:
    with ReportServer([tmp_path], port=0) as server:
        assert server.server_address[0] == "127.0.0.1"
        assert server.url.startswith("http://127.0.0.1:")


async def test_the_served_page_fetches_trials_on_demand(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=1, failing=1)
    failed = trial_of(job, "fail-")
    threads_before = set(threading.enumerate())

    with serving(ReportServer([tmp_path / "jobs"], port=0)) as server:
        status, kind, page = get(server.url)
        part = get(server.url + "?part=main")[2]
        detail = get(f"{server.url}trial?job={job.job_id}&id={failed.trial_id}")
        missing = get(f"{server.url}trial?job={job.job_id}&id=no-such-trial")
        elsewhere = get(server.url + "etc/passwd")

    assert (status, kind) == (200, "text/html; charset=utf-8")
    assert 'data-live="1"' in page and failed.trial_id in page
    assert 'id="detail-' not in page  # details are fetched, not inlined
    assert part.startswith('<section class="job"') and "<html" not in part
    assert detail[0] == 200 and "Why it failed" in detail[2]
    assert failed.error is not None and failed.error.message.split(":")[0] in detail[2]
    assert missing[0] == 404 and "no such trial" in missing[2]
    assert elsewhere[0] == 404
    assert set(threading.enumerate()) == threads_before  # the serve loop ended with the block


async def test_the_state_endpoint_changes_when_a_trial_starts_or_ends(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=2, failing=0)
    trial = Path(job.trials[0].trial_dir)

    with serving(ReportServer([tmp_path / "jobs"], port=0)) as server:
        first = json.loads(get(server.url + "api/state")[2])
        same = json.loads(get(server.url + "api/state")[2])
        with run_holding(job.job_dir):  # a run of the job, its trial back in flight
            shutil.move(trial / "result.json", tmp_path / "result.json")
            running = json.loads(get(server.url + "api/state")[2])
            page = get(server.url)[2]
        shutil.move(tmp_path / "result.json", trial / "result.json")
        done = json.loads(get(server.url + "api/state")[2])

    assert first == same and first["running"] is False and first["jobs"] == [job.job_id]
    assert running["running"] is True and running["fingerprint"] != first["fingerprint"]
    assert 'class="st st-running">running</span>' in page
    assert done == first


def test_a_port_in_use_is_refused_by_the_os(tmp_path: Path) -> None:
    with ReportServer([tmp_path], port=0) as taken:
        port = taken.server_address[1]
        with pytest.raises(OSError):
            ReportServer([tmp_path], port=port)
