"""Exports read back equal to the trials' results: JSON Lines, CSV and Parquet, with and
without trajectories (messages, token ids, logprobs)."""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from container_runtime.trajectory import messages_from_trajectory
from orchestrator import TrialResult
from orchestrator.cli import main
from orchestrator.report.disk import read_job
from orchestrator.report.export import TIMINGS, USAGE, rows_of, write
from orchestrator.service.job import JobRecord
from tests.report.helpers import fake_job, trial_of, write_trajectory

DRIFT = {
    "kind": "re-rendered",
    "detail": "call 1's prompt (40 tokens) and call 0's prompt + completion (30 tokens) differ "
    "from token 21 on, inside call 0's completion: the answer came back in other tokens",
    "calls": 2,
    "call": 1,
    "previous_call": 0,
    "first_difference": 21,
    "previous_tokens": 30,
    "previous_prompt_tokens": 21,
    "prompt_tokens": 40,
    "diverged_calls": 1,
}


async def _job(tmp_path: Path) -> tuple[JobRecord, dict[str, Any]]:
    """A job of three trials; the passing one has a trajectory, model usage and two named
    rewards, as a trial through the gateway with a reward.json would."""
    job = await fake_job(tmp_path, passing=2, failing=1)
    rich = trial_of(job, "pass-0")
    doc = write_trajectory(rich.trial_dir)
    path = Path(rich.trial_dir) / "result.json"
    data = json.loads(path.read_text())
    data["usage"] = {"calls": 2, "prompt_tokens": 51, "completion_tokens": 11}
    data["token_drift"] = DRIFT
    data["rewards"] = {"reward": 1.0, "style": 0.25}
    path.write_text(json.dumps(data))
    return job, doc


def _results(job: JobRecord) -> dict[str, TrialResult]:
    read = read_job(Path(job.job_dir))
    return {r.trial_id: r for r in read.results}


def _check_row(row: dict[str, Any], result: TrialResult, *, counted: bool) -> None:
    """A row (nested, native types) says what its result.json says."""
    error = result.error
    assert row["trial_id"] == result.trial_id and row["job_id"] == result.job_id
    assert (row["task_name"], row["attempt"], row["agent"]) == (
        result.task_name, result.attempt, result.agent_spec,
    )  # fmt: skip
    assert (row["status"], row["reward"], row["rewards"]) == (
        result.status, result.reward, result.rewards,
    )  # fmt: skip
    assert row["error_category"] == (error.category if error else None)
    assert row["error_message"] == (error.message if error else None)
    assert row["timings"] == result.timings.model_dump()
    assert row["usage"] == (result.usage.model_dump() if result.usage else None)
    assert row["counted"] is counted
    assert row["started_at"] == result.started_at
    assert row["agent_exit_code"] == result.agent.exit_code
    drift = result.token_drift
    assert row["token_drift"] == (drift.kind if drift else None)
    assert row["token_drift_call"] == (drift.call if drift else None)
    assert row["token_drift_detail"] == (drift.detail if drift else None)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """A flat (CSV or Parquet) row back in the JSON Lines shape."""
    row = {k: v for k, v in flat.items() if "." not in k}
    row["timings"] = {p: flat[f"timings.{p}"] for p in TIMINGS}
    usage = {u: flat[f"usage.{u}"] for u in USAGE}
    row["usage"] = None if all(v is None for v in usage.values()) else usage
    row["rewards"] = {
        k.removeprefix("rewards."): v
        for k, v in flat.items()
        if k.startswith("rewards.") and v is not None
    }
    return row


def _from_csv(value: str, column: str) -> Any:
    if value == "":
        return None
    if column.startswith(("timings.", "rewards.")) or column == "reward":
        return float(value)
    if column.startswith("usage.") or column in ("attempt", "agent_exit_code", "token_drift_call"):
        return int(value)
    if column == "counted":
        return value == "True"
    if column.endswith("_at"):
        return datetime.fromisoformat(value)
    if column in ("warnings", "messages", "completions"):
        return json.loads(value)
    return value


async def test_jsonl_reads_back_as_the_results(tmp_path: Path) -> None:
    job, _ = await _job(tmp_path)
    results = _results(job)
    out = tmp_path / "trials.jsonl"

    write(rows_of(read_job(Path(job.job_dir))), "jsonl", out)

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["trial_id"] for r in rows) == sorted(results)
    for row in rows:
        row["started_at"] = datetime.fromisoformat(row["started_at"])
        _check_row(row, results[row["trial_id"]], counted=True)
        assert "messages" not in row  # only with --with-trajectories
    assert {r["trial_id"]: r["rewards"] for r in rows}[trial_of(job, "pass-0").trial_id] == {
        "reward": 1.0,
        "style": 0.25,
    }


async def test_csv_reads_back_as_the_results(tmp_path: Path) -> None:
    job, _ = await _job(tmp_path)
    results = _results(job)
    out = tmp_path / "trials.csv"

    write(rows_of(read_job(Path(job.job_dir))), "csv", out)

    with out.open(newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 3
    assert {"rewards.reward", "rewards.style", "timings.agent", "usage.calls"} <= set(table[0])
    for flat in table:
        row = _nest({k: _from_csv(v, k) for k, v in flat.items()})
        _check_row(row, results[row["trial_id"]], counted=True)


async def test_parquet_reads_back_as_the_results(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")  # in the dev extra, so installed
    job, doc = await _job(tmp_path)
    results = _results(job)
    out = tmp_path / "trials.parquet"

    rows = rows_of(read_job(Path(job.job_dir)), with_trajectories=True)
    write(rows, "parquet", out, with_trajectories=True)

    table = pq.read_table(out)
    assert table.schema.field("timings.agent").type == "double"
    assert str(table.schema.field("started_at").type) == "timestamp[us, tz=UTC]"
    by_id = {r["trial_id"]: r for r in table.to_pylist()}
    assert set(by_id) == set(results)
    for trial_id, flat in by_id.items():
        _check_row(_nest(flat), results[trial_id], counted=True)
    rich = by_id[trial_of(job, "pass-0").trial_id]
    assert json.loads(rich["messages"]) == messages_from_trajectory(doc)
    assert [c["completion_token_ids"] for c in rich["completions"]] == [[7, 8, 9, 10, 11], [12, 13]]
    assert rich["completions"][0]["prompt_token_ids"] == [101, 102, 103]
    assert rich["completions"][1]["logprobs"] == [-0.75, -0.0625]


async def test_with_trajectories_adds_messages_token_ids_and_logprobs(tmp_path: Path) -> None:
    job, doc = await _job(tmp_path)
    out = tmp_path / "trials.jsonl"

    code = main(["export", job.job_dir, "--with-trajectories", "-o", str(out)])

    assert code == 0
    rows = {r["trial_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    rich = rows[trial_of(job, "pass-0").trial_id]
    assert rich["messages"] == messages_from_trajectory(doc)
    roles = [m["role"] for m in rich["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert rich["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
    assert rich["completions"] == [
        {
            "step_id": 3,
            "prompt_token_ids": [101, 102, 103],
            "completion_token_ids": [7, 8, 9, 10, 11],
            "logprobs": [-0.5, -0.25, -0.125, -1.0, -2.0],
        },
        {
            "step_id": 4,
            "prompt_token_ids": None,
            "completion_token_ids": [12, 13],
            "logprobs": [-0.75, -0.0625],
        },
    ]
    plain = rows[trial_of(job, "pass-1").trial_id]
    assert (plain["messages"], plain["completions"], plain["trajectory_problem"]) == ([], [], None)


async def test_superseded_attempts_are_rows_that_do_not_count(tmp_path: Path) -> None:
    from orchestrator.service.retries import Backoff
    from tests.jobs.helpers import FlakyBackend

    backend = FlakyBackend(lambda trial_id: ".retry" not in trial_id)
    job = await fake_job(
        tmp_path, passing=1, failing=0, backend=backend, max_retries=1,
        retry_backoff=Backoff(first_sec=0.0, max_sec=0.0),
    )  # fmt: skip

    rows = rows_of(read_job(Path(job.job_dir)))

    [old] = job.superseded
    [new] = job.trials
    assert [(r.trial_id, r.counted, r.superseded_by, r.error_category) for r in rows] == [
        (old.trial_id, False, new.trial_id, "infra"),
        (new.trial_id, True, None, None),
    ]


async def test_parquet_without_pyarrow_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await fake_job(tmp_path, passing=1, failing=0)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError

    with pytest.raises(ValueError, match=r"pip install 'trialbox\[parquet\]'"):
        write(rows_of(read_job(Path(job.job_dir))), "parquet", tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


async def test_export_to_stdout_writes_only_the_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = await fake_job(tmp_path, passing=1, failing=1)

    code = main(["export", job.job_dir, "--format", "csv", "-o", "-"])

    assert code == 0
    out = capsys.readouterr().out
    rows = list(csv.DictReader(out.splitlines()))
    assert sorted(r["trial_id"] for r in rows) == sorted(t.trial_id for t in job.trials)


async def test_a_job_without_results_yet_exports_the_header_alone(tmp_path: Path) -> None:
    job = await fake_job(tmp_path, passing=1, failing=0)
    full = tmp_path / "full.csv"
    write(rows_of(read_job(Path(job.job_dir))), "csv", full)
    (Path(job.trials[0].trial_dir) / "result.json").unlink()  # as when the job just started
    empty = tmp_path / "empty.csv"

    write(rows_of(read_job(Path(job.job_dir))), "csv", empty)

    header = full.read_text().splitlines()[0]
    assert empty.read_text() == header.replace(",rewards.reward", "") + "\n"


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
async def test_token_drift_is_a_column_of_every_format(tmp_path: Path, fmt: str) -> None:
    """The rich trial's drift is its columns; a trial without one (no model, or a
    result.json from before drift was judged) has empty ones."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow.parquet")
    job, _ = await _job(tmp_path)
    out = tmp_path / f"trials.{fmt}"

    write(rows_of(read_job(Path(job.job_dir))), fmt, out)  # type: ignore[arg-type]

    if fmt == "jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    elif fmt == "csv":
        with out.open(newline="", encoding="utf-8") as handle:
            rows = [{k: _from_csv(v, k) for k, v in r.items()} for r in csv.DictReader(handle)]
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(out)
        assert str(table.schema.field("token_drift_call").type) == "int64"
        rows = table.to_pylist()
    by_id = {r["trial_id"]: r for r in rows}
    rich = by_id.pop(trial_of(job, "pass-0").trial_id)
    assert (rich["token_drift"], rich["token_drift_call"]) == ("re-rendered", 1)
    assert rich["token_drift_detail"] == DRIFT["detail"]
    for plain in by_id.values():
        assert (plain["token_drift"], plain["token_drift_call"]) == (None, None)
        assert plain["token_drift_detail"] is None
