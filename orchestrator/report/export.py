"""`trialbox export`: one row per trial, in the files trainers' pipelines load.

Every trial with a `result.json` is a row, superseded attempts too (`counted` and
`superseded_by` say which rows the job's aggregates use; a trainer usually keeps
`counted` rows). JSON Lines keeps the nesting of `result.json` (`timings`, `usage`,
`rewards`); CSV and Parquet are flat: `timings.agent`, `usage.calls`, one `rewards.<name>`
column per reward name. `token_drift` (with `token_drift_call` and `token_drift_detail`) says
whether the trial's token ids can be trained on as recorded (`none`). `--with-trajectories`
adds the chat messages (OpenAI shape), and per model answer its token ids and logprobs
(`completions`), read from the trial's ATIF trajectory. Values that are lists or objects are
native in JSON Lines and Parquet (messages: JSON text in Parquet, their shape varies) and
JSON text in CSV.

`rows_of` makes the rows (`ExportRow`), `write` writes them in a format.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, Field

from orchestrator.jobs.aggregates import counted
from orchestrator.report import trajectory
from orchestrator.report.disk import JobOnDisk
from orchestrator.report.stats import PHASES
from orchestrator.trials.result import TrialResult

ExportFormat = Literal["jsonl", "csv", "parquet"]
TIMINGS = (*PHASES, "total")
USAGE = ("calls", "prompt_tokens", "completion_tokens")
_JSON_TEXT_IN_PARQUET = ("messages",)
_NESTED = ("timings", "usage", "rewards")
TRAJECTORY_COLUMNS = ("messages", "completions", "trajectory_problem")


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
    token_drift: str | None = Field(
        None,
        description="none, re-rendered, truncated or unknown: whether the model calls' token "
        "ids stayed one prefix-extending sequence (`result.token_drift.kind`); None: no model.",
    )
    token_drift_call: int | None = Field(
        None, description="The exchange index of the first call that diverged (or lacked ids)."
    )
    token_drift_detail: str | None = Field(None, description="Where and why, in words.")
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


def write(
    rows: list[ExportRow],
    fmt: ExportFormat,
    out: Path | IO[str],
    *,
    with_trajectories: bool = False,
) -> None:
    """Write `rows` as `fmt` to a path, or (JSON Lines and CSV) to an open text stream.
    `with_trajectories`: the rows carry the trajectory columns (`rows_of(...,
    with_trajectories=True)`); an empty export then names them too."""
    if fmt == "parquet":
        if not isinstance(out, Path):
            raise ValueError("parquet is written to a file (-o FILE), not to a stream")
        _write_parquet(rows, out, with_trajectories)
        return
    with _text_out(out) as stream:
        if fmt == "jsonl":
            left_out = set() if with_trajectories else set(TRAJECTORY_COLUMNS)
            for row in rows:
                stream.write(row.model_dump_json(exclude=left_out) + "\n")
        else:
            _write_csv(rows, stream, with_trajectories)


def columns(reward_names: Iterable[str], *, with_trajectories: bool) -> list[str]:
    """The flat (CSV and Parquet) columns, in order: the row's own, the trajectory's when
    asked for, then `timings.*`, `usage.*` and one `rewards.<name>` per reward name."""
    own = [name for name in ExportRow.model_fields if name not in _NESTED + TRAJECTORY_COLUMNS]
    return [
        *own,
        *(TRAJECTORY_COLUMNS if with_trajectories else ()),
        *(f"timings.{phase}" for phase in TIMINGS),
        *(f"usage.{name}" for name in USAGE),
        *(f"rewards.{name}" for name in reward_names),
    ]


def flat(row: ExportRow, names: list[str], *, with_trajectories: bool) -> dict[str, Any]:
    """The row as the flat columns (`columns(names, ...)`) say."""
    data = row.model_dump()
    for phase in TIMINGS:
        data[f"timings.{phase}"] = row.timings.get(phase)
    for name in USAGE:
        data[f"usage.{name}"] = None if row.usage is None else row.usage.get(name)
    for name in names:
        data[f"rewards.{name}"] = row.rewards.get(name)
    return {key: data[key] for key in columns(names, with_trajectories=with_trajectories)}


def reward_names(rows: list[ExportRow]) -> list[str]:
    return sorted({name for row in rows for name in row.rewards})


def _row(job: JobOnDisk, r: TrialResult, scored: bool, *, with_trajectories: bool) -> ExportRow:
    error, drift = r.error, r.token_drift
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
        token_drift=drift.kind if drift else None,
        token_drift_call=drift.call if drift else None,
        token_drift_detail=drift.detail if drift else None,
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


def _write_csv(rows: list[ExportRow], stream: IO[str], with_trajectories: bool) -> None:
    names = reward_names(rows)
    header = columns(names, with_trajectories=with_trajectories)
    writer = csv.DictWriter(stream, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        record = flat(row, names, with_trajectories=with_trajectories)
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


def _write_parquet(rows: list[ExportRow], out: Path, with_trajectories: bool) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        needed = "--format parquet needs pyarrow: pip install 'trialbox[parquet]'"
        raise ValueError(needed) from None
    names = reward_names(rows)
    table = []
    for row in rows:
        record = flat(row, names, with_trajectories=with_trajectories)
        for key in _JSON_TEXT_IN_PARQUET:
            if key in record:
                record[key] = json.dumps(record[key], ensure_ascii=False)
        table.append(record)
    header = columns(names, with_trajectories=with_trajectories)
    schema = pa.schema([pa.field(name, _parquet_type(pa, name)) for name in header])
    pq.write_table(pa.Table.from_pylist(table, schema=schema), out)


def _parquet_type(pa: Any, column: str) -> Any:
    """The Parquet type of a flat column."""
    whole, real, text = pa.int64(), pa.float64(), pa.string()
    if column.startswith(("timings.", "rewards.")) or column == "reward":
        return real
    if column.startswith("usage.") or column in ("attempt", "agent_exit_code", "token_drift_call"):
        return whole
    if column == "counted":
        return pa.bool_()
    if column in ("started_at", "finished_at"):
        return pa.timestamp("us", tz="UTC")
    if column == "warnings":
        return pa.list_(text)
    if column == "completions":
        fields = [
            ("step_id", whole),
            ("prompt_token_ids", pa.list_(whole)),
            ("completion_token_ids", pa.list_(whole)),
            ("logprobs", pa.list_(real)),
        ]
        return pa.list_(pa.struct(fields))
    return text
