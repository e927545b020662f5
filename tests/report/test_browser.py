"""The report in a real browser (headless Chromium), on a job of real trials in Docker (the
oracle solving examples/hello-oracle, and a task whose verifier writes no reward) and a
fake-backend trial with an ATIF trajectory: what is rendered, the two clicks from the
report to why a trial failed, sorting and filtering, a served page refreshing while a job
runs, and untrusted text shown, never run."""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator import TrialConfig, TrialResult
from orchestrator.report.build import report_html
from orchestrator.report.server import ReportServer, serving
from orchestrator.service.job import JobRecord, run_job
from tests.conftest import BASE_IMAGE_MAP, EXAMPLES, TEST_OWNER, write_task
from tests.report.browser import browser_page, dump_dom, screenshot
from tests.report.helpers import (
    PAYLOAD,
    SOLVE,
    fake_config,
    fake_job,
    run_holding,
    write_trajectory,
)

pytestmark = [pytest.mark.browser, pytest.mark.docker]

REPO_DOCS = Path(__file__).resolve().parents[2] / "docs"
# HTML in the verifier's output, which the report must show as text.
NO_REWARD_VERIFIER = "#!/bin/sh\ncat /tests/payload.txt\necho but wrote no reward\n"


@dataclass
class Jobs:
    jobs_dir: Path
    real: JobRecord
    fake: JobRecord
    report: Path

    @property
    def failed(self) -> TrialResult:
        [trial] = [t for t in self.real.trials if t.status == "failure"]
        return trial


@pytest.fixture(scope="module")
def jobs(docker_ready: object, tmp_path_factory: pytest.TempPathFactory) -> Jobs:
    """Two jobs in one folder, made once for the module (the tests only read them)."""
    root = tmp_path_factory.mktemp("browser")
    jobs_dir = root / "jobs"
    broken = write_task(
        root / "tasks", "no-reward", solve_sh=SOLVE, test_sh=NO_REWARD_VERIFIER,
        files={"tests/payload.txt": f"looked at /app: {PAYLOAD}\n"},
    )  # fmt: skip
    config = TrialConfig(base_image_map=BASE_IMAGE_MAP, jobs_dir=jobs_dir, owner=TEST_OWNER)
    real = asyncio.run(
        run_job([EXAMPLES / "hello-oracle", broken], "oracle", config=config, job_id="real-trials")
    )
    fake = asyncio.run(
        fake_job(
            root, passing=1, failing=0, job_id="fake-trajectory",
            config=fake_config(root, jobs_dir=jobs_dir),
        )
    )  # fmt: skip
    write_trajectory(fake.trials[0].trial_dir)
    report = root / "report.html"
    report.write_text(report_html([jobs_dir], live=False), encoding="utf-8")
    assert real.counts_by_status == {"success": 1, "failure": 1}
    return Jobs(jobs_dir, real, fake, report)


def drawer(dom: str) -> tuple[str, str]:
    """(the drawer's opening tag, its content) in a dumped DOM."""
    found = re.search(r'(<aside id="drawer"[^>]*>)(.*?)</aside>', dom, re.S)
    assert found, "no drawer in the page"
    return found.group(1), found.group(2)


def test_the_report_renders_every_trial_and_its_phases_on_the_timeline(
    jobs: Jobs, tmp_path: Path
) -> None:
    dom = dump_dom(jobs.report.as_uri(), tmp_path / "profile")

    trials = jobs.real.trials + jobs.fake.trials
    lanes = dict(re.findall(r'<div class="lane[^"]*" data-trial="([^"]+)">(.*?)</div></div>', dom))
    assert set(lanes) == {t.trial_id for t in trials}
    for trial in jobs.real.trials:
        assert re.search(rf'<tr class="[^"]*" data-trial="{re.escape(trial.trial_id)}"', dom)
        bars = re.findall(r'<i class="bar ph-(\w+)"', lanes[trial.trial_id])
        assert bars[0] == "waiting" and bars[-1] in ("collect", "teardown"), bars
        assert {"image", "start", "agent", "verify"} <= set(bars)
    # The page's script ran: it counted the rows it shows.
    assert dom.count("showing 2 of 2") == 1 and dom.count("showing 1 of 1") == 1
    assert "Jobs side by side" in dom


def test_a_failed_trial_shows_why_and_its_log_as_text(jobs: Jobs, tmp_path: Path) -> None:
    url = f"{jobs.report.as_uri()}#trial={jobs.real.job_id}/{jobs.failed.trial_id}"

    dom = dump_dom(url, tmp_path / "profile")

    tag, shown = drawer(dom)
    assert "hidden" not in tag
    assert jobs.failed.error is not None
    assert "Why it failed" in shown and 'class="cat-validation">validation</span>' in shown
    assert html.escape(jobs.failed.error.message.splitlines()[0], quote=False) in shown
    assert "test-stdout.txt" in shown and "but wrote no reward" in shown
    # The verifier's <script> and <img onerror> are text on the page, and never ran.
    assert "&lt;script&gt;document.body.setAttribute(" in shown
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "pwned" not in body.group(0)
    assert "<img src=" not in dom


def test_a_trajectory_shows_its_tool_call_step_by_step(jobs: Jobs, tmp_path: Path) -> None:
    [trial] = jobs.fake.trials
    url = f"{jobs.report.as_uri()}#trial={jobs.fake.job_id}/{trial.trial_id}"

    _, shown = drawer(dump_dom(url, tmp_path / "profile"))

    steps = re.findall(r'<li class="step src-(\w+)">', shown)
    assert steps == ["system", "user", "agent", "agent"]
    assert '<span class="tag">tool call</span> <b>bash</b>' in shown
    assert "printf &#x27;Hello&#x27; &gt; /app/hello.txt" in shown or (
        "printf 'Hello' &gt; /app/hello.txt" in shown
    )
    assert '<span class="tag">observation</span> for <code>call_1</code>' in shown
    assert "completion_token_ids (count) 5" in shown


async def test_two_clicks_from_the_report_to_why_a_trial_failed(jobs: Jobs, tmp_path: Path) -> None:
    async with browser_page(tmp_path / "profile") as page:
        await page.goto(jobs.report.as_uri())
        assert await page.evaluate("document.getElementById('drawer').hidden") is True

        # Click 1: the failed trial in "Failed trials"; its error is the first thing shown.
        await page.evaluate("document.querySelector('.failures a.open-trial').click()")
        why = await page.wait_for(
            "!document.getElementById('drawer').hidden && "
            "document.querySelector('#drawer-body .box.error')?.innerText"
        )
        assert why.startswith("Why it failed: validation error")
        log = await page.evaluate(
            "[...document.querySelectorAll('#drawer-body pre.log')].map(p => p.textContent)"
            ".join('\\n')"
        )
        assert PAYLOAD in log  # shown as the text it is
        assert await page.evaluate("document.body.dataset.pwned === undefined") is True

        # Escape closes it; the hash goes with it.
        await page.evaluate("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
        assert await page.wait_for("document.getElementById('drawer').hidden")
        assert await page.evaluate("location.hash") == ""


async def test_the_table_sorts_and_filters(jobs: Jobs, tmp_path: Path) -> None:
    job = f"section.job[data-job='{jobs.real.job_id}']"
    rows = f"{job} table.trials tbody tr:not(.hide)"
    visible = f'[...document.querySelectorAll("{rows}")].map(r => r.dataset.status)'
    async with browser_page(tmp_path / "profile") as page:
        await page.goto(jobs.report.as_uri())

        await page.evaluate(f"document.querySelector(\"{job} th[data-key='status']\").click()")
        assert await page.evaluate(visible) == ["failure", "success"]
        await page.evaluate(f"document.querySelector(\"{job} th[data-key='status']\").click()")
        assert await page.evaluate(visible) == ["success", "failure"]

        await page.evaluate(
            f"(s => {{ s.value = 'failure'; s.dispatchEvent(new Event('input')); }})"
            f"(document.querySelector(\"{job} select[data-filter='status']\"))"
        )
        assert await page.evaluate(visible) == ["failure"]
        lanes = await page.evaluate(
            f'[...document.querySelectorAll("{job} .lane:not(.hide)")].map(l => l.dataset.trial)'
        )
        assert lanes == [jobs.failed.trial_id]  # the timeline follows the filter
        assert "showing 1 of 2" in await page.evaluate(
            f'document.querySelector("{job} .filters .shown").textContent'
        )


async def test_the_served_page_refreshes_while_a_job_runs(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=2, failing=1)
    trial = Path(job.trials[0].trial_dir)
    held = tmp_path / "held-result.json"
    state = f"document.querySelector('section.job[data-job=\"{job.job_id}\"] .state').textContent"

    with serving(ReportServer([tmp_path / "jobs"], port=0)) as server:
        async with browser_page(tmp_path / "profile") as page:
            with run_holding(job.job_dir):  # a run of the job holds its folder...
                shutil.move(trial / "result.json", held)  # ...and that trial is in flight
                await page.goto(server.url)
                assert (await page.evaluate(state)).startswith("running · 2 of 3 done, 1 in flight")
                assert (
                    await page.evaluate(
                        f"document.querySelector('tr[data-trial=\"{trial.name}\"]').dataset.status"
                    )
                    == "running"
                )

            shutil.move(held, trial / "result.json")  # the trial ended, and its run
            assert (await page.wait_for(state + ".startsWith('finished') && " + state)).startswith(
                "finished · 3 of 3 trials"
            )

            # A trial's detail is fetched from the server when it is opened.
            failed = next(t for t in job.trials if t.status == "failure")
            await page.evaluate(f"location.hash = '#trial={job.job_id}/{failed.trial_id}'")
            why = await page.wait_for(
                "document.querySelector('#drawer-body .box.error')?.innerText"
            )
            assert "validation" in why


def test_a_screenshot_of_the_report(jobs: Jobs, tmp_path: Path) -> None:
    """The README's picture: set TRIALBOX_UPDATE_SCREENSHOT=1 to write docs/report.png."""
    page = tmp_path / "real-trials.html"
    page.write_text(report_html([Path(jobs.real.job_dir)], live=False), encoding="utf-8")
    out = tmp_path / "report.png"

    shot = screenshot(page.as_uri(), out, tmp_path / "profile", (1400, 1000))

    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", shot[16:24])
    assert (width, height) == (1400, 1000)
    assert len(shot) > 50_000  # a page, not a blank
    if os.environ.get("TRIALBOX_UPDATE_SCREENSHOT") == "1":
        shutil.copy(out, REPO_DOCS / "report.png")


async def test_the_jobs_side_by_side_fit_a_1400_pixel_window(jobs: Jobs, tmp_path: Path) -> None:
    """The comparison of several jobs is read at a glance: no sideways scrolling on a laptop's
    window, with job ids as long as the default ones."""
    async with browser_page(tmp_path / "profile") as page:
        await page.call(
            "Emulation.setDeviceMetricsOverride", width=1400, height=900,
            deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        await page.goto(jobs.report.as_uri())
        widths = await page.evaluate(
            "(() => { const box = document.querySelector('.comparison .scroll-x');"
            " [...box.querySelectorAll('td a')].forEach(a => {"
            " a.textContent = 'job__20261203-215500-7f3a9c'; });"
            " return [box.scrollWidth, box.clientWidth]; })()"
        )
    scroll_width, client_width = widths
    assert client_width > 0 and scroll_width <= client_width, widths
