"""`trialbox export`: one row per trial, in the files trainers' pipelines load.

Every trial with a `result.json` is a row, superseded attempts too (`counted` and
`superseded_by` say which rows the job's aggregates use; a trainer usually keeps
`counted` rows). JSON Lines keeps the nesting of `result.json` (`timings`, `usage`,
`rewards`); CSV and Parquet are flat: `timings.agent`, `usage.calls`, one `rewards.<name>`
column per reward name. `--with-trajectories` adds the chat messages (OpenAI shape), and
per model answer its token ids and logprobs (`completions`), read from the trial's ATIF
trajectory. Values that are lists or objects are native in JSON Lines and Parquet
(messages: JSON text in Parquet, their shape varies) and JSON text in CSV.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, Field

from orchestrator.report import trajectory
from orchestrator.report.disk import JobOnDisk
from orchestrator.report.stats import PHASES
from orchestrator.service.aggregates import counted
from orchestrator.trials.result import TrialResult

ExportFormat = Literal["jsonl", "csv", "parquet"]
TIMINGS = (*PHASES, "total")
USAGE = ("calls", "prompt_tokens", "completion_tokens")
_JSON_TEXT_IN_PARQUET = ("messages",)


class ExportRow(BaseModel):
    """One trial, as every format writes it (CSV and Parquet flatten the nested parts)."""

    job_id: str
    trial_id: str
    rollout_id: str | None
    session_id: str | None
    task_name: str
    task_checksum: str | None
    agent: str
    attempt: int
    status: str
    counted: bool = Field(description="In the job's aggregates (a sample that means something).")
    superseded_by: str | None
    reward: float | None
    rewards: dict[str, float]
    error_category: str | None
    error_phase: str | None
    error_type: str | None
    error_message: str | None
    agent_termination: str | None
    agent_exit_code: int | None
    timings: dict[str, float]
    usage: dict[str, int] | None
    model_limit: str | None
    warnings: list[str]
    started_at: datetime
    finished_at: datetime | None
    trial_dir: str
    messages: list[dict[str, Any]] | None = None
    completions: list[trajectory.Completion] | None = None
    trajectory_problem: str | None = None


def rows_of(job: JobOnDisk, *, with_trajectories: bool = False) -> list[ExportRow]:
    """Every result of the job, oldest first."""
    scored = {r.trial_id for r in counted(job.last_results)}
    return [
        _row(job, r, r.trial_id in scored, with_trajectories=with_trajectories) for r in job.results
    ]


def write(rows: list[ExportRow], fmt: ExportFormat, out: Path | IO[str]) -> None:
    """Write `rows` as `fmt` to a path, or (JSON Lines and CSV) to an open text stream."""
    if fmt == "parquet":
        if not isinstance(out, Path):
            raise ValueError("parquet is written to a file (-o FILE), not to a stream")
        _write_parquet(rows, out)
        return
    with _text_out(out) as stream:
        if fmt == "jsonl":
            for row in rows:
                stream.write(row.model_dump_json(exclude=_left_out(row)) + "\n")
        else:
            _write_csv(rows, stream)


def flat(row: ExportRow, reward_names: Iterable[str]) -> dict[str, Any]:
    """The row with `timings.*`, `usage.*` and `rewards.*` as columns of their own."""
    data = row.model_dump(exclude=_left_out(row) | {"timings", "usage", "rewards"})
    for phase in TIMINGS:
        data[f"timings.{phase}"] = row.timings.get(phase)
    for name in USAGE:
        data[f"usage.{name}"] = None if row.usage is None else row.usage.get(name)
    for name in reward_names:
        data[f"rewards.{name}"] = row.rewards.get(name)
    return data


def reward_names(rows: list[ExportRow]) -> list[str]:
    return sorted({name for row in rows for name in row.rewards})


def _left_out(row: ExportRow) -> set[str]:
    """The trajectory columns, unless they were asked for."""
    if row.messages is None and row.completions is None and row.trajectory_problem is None:
        return {"messages", "completions", "trajectory_problem"}
    return set()


def _row(job: JobOnDisk, r: TrialResult, scored: bool, *, with_trajectories: bool) -> ExportRow:
    error = r.error
    row = ExportRow(
        job_id=r.job_id,
        trial_id=r.trial_id,
        rollout_id=r.rollout_id,
        session_id=r.session_id,
        task_name=r.task_name,
        task_checksum=r.task_checksum,
        agent=r.agent_spec,
        attempt=r.attempt,
        status=r.status,
        counted=scored,
        superseded_by=job.superseded_by.get(r.trial_id),
        reward=r.reward,
        rewards=r.rewards,
        error_category=error.category if error else None,
        error_phase=error.phase if error else None,
        error_type=error.type if error else None,
        error_message=error.message if error else None,
        agent_termination=r.agent.termination,
        agent_exit_code=r.agent.exit_code,
        timings=r.timings.model_dump(),
        usage=r.usage.model_dump() if r.usage else None,
        model_limit=r.model_limit,
        warnings=r.warnings,
        started_at=r.started_at,
        finished_at=r.finished_at,
        trial_dir=r.trial_dir,
    )
    if with_trajectories:
        folder = job.job_dir / (Path(r.trial_dir).name or r.trial_id)
        doc, problem = trajectory.load(folder)
        fields = trajectory.TrainingFields(trajectory_problem=problem)
        if doc is not None:
            fields = trajectory.training_fields(doc)
        row.messages = fields.messages
        row.completions = fields.completions
        row.trajectory_problem = fields.trajectory_problem
    return row


class _text_out:
    """A path opened for writing (closed after), or a stream given (left open)."""

    def __init__(self, out: Path | IO[str]) -> None:
        self.out = out
        self.opened: IO[str] | None = None

    def __enter__(self) -> IO[str]:
        if isinstance(self.out, Path):
            self.opened = self.out.open("w", encoding="utf-8", newline="")
            return self.opened
        return self.out

    def __exit__(self, *exc: object) -> None:
        if self.opened is not None:
            self.opened.close()


def _write_csv(rows: list[ExportRow], stream: IO[str]) -> None:
    names = reward_names(rows)
    table = [flat(row, names) for row in rows]
    columns = list(table[0]) if table else list(ExportRow.model_fields)
    writer = csv.DictWriter(stream, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for record in table:
        writer.writerow({k: _csv_value(v) for k, v in record.items()})


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _write_parquet(rows: list[ExportRow], out: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            "--format parquet needs pyarrow: pip install 'trialbox[parquet]'"
        ) from None
    names = reward_names(rows)
    table = []
    for row in rows:
        record = flat(row, names)
        for key in _JSON_TEXT_IN_PARQUET:
            if key in record:
                record[key] = json.dumps(record[key], ensure_ascii=False)
        table.append(record)
    trajectories = bool(rows) and not _left_out(rows[0])
    schema = pa.schema(_parquet_fields(pa, names, with_trajectories=trajectories))
    pq.write_table(pa.Table.from_pylist(table, schema=schema), out)


def _parquet_fields(pa: Any, names: list[str], *, with_trajectories: bool) -> list[Any]:
    text, whole, real, flag = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    when = pa.timestamp("us", tz="UTC")
    fields = [
        ("job_id", text), ("trial_id", text), ("rollout_id", text), ("session_id", text),
        ("task_name", text), ("task_checksum", text), ("agent", text), ("attempt", whole),
        ("status", text), ("counted", flag), ("superseded_by", text), ("reward", real),
        ("error_category", text), ("error_phase", text), ("error_type", text),
        ("error_message", text), ("agent_termination", text), ("agent_exit_code", whole),
        ("model_limit", text), ("warnings", pa.list_(text)), ("started_at", when),
        ("finished_at", when), ("trial_dir", text),
    ]  # fmt: skip
    if with_trajectories:
        completion = pa.struct(
            [
                ("step_id", whole),
                ("prompt_token_ids", pa.list_(whole)),
                ("completion_token_ids", pa.list_(whole)),
                ("logprobs", pa.list_(real)),
            ]
        )
        fields += [
            ("messages", text),
            ("completions", pa.list_(completion)),
            ("trajectory_problem", text),
        ]
    fields += [(f"timings.{p}", real) for p in TIMINGS]
    fields += [(f"usage.{u}", whole) for u in USAGE]
    fields += [(f"rewards.{n}", real) for n in names]
    return [pa.field(name, kind) for name, kind in fields]


def export_text(rows: list[ExportRow], fmt: Literal["jsonl", "csv"]) -> str:
    """The export as a string (JSON Lines or CSV), for small jobs and tests."""
    buffer = io.StringIO()
    write(rows, fmt, buffer)
    return buffer.getvalue()
