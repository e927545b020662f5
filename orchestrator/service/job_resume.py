"""What a resumed job still has to run, read from its trials' own `result.json` files.

A (task, attempt) whose last result is a sample (scored, or a failure of the agent, the
verifier or the task) is kept untouched. One whose last result ended in `infra` or was
cancelled runs again (the sample said nothing about the agent), and so does one with no
result at all: its trial was in flight when the job died.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from orchestrator.service.job_record import Chain, chain_position
from orchestrator.service.retries import is_infra
from orchestrator.trials.result import TrialResult

RESULT_FILE = "result.json"


def needs_rerun(result: TrialResult) -> bool:
    """Infra failures and cancelled (or never settled) trials are run again."""
    return result.status not in ("success", "failure") or is_infra(result)


def read_results(job_dir: Path, job_id: str) -> tuple[list[TrialResult], list[str]]:
    """Every readable result.json of the job's trials, and a note for each unreadable one
    (a trial killed while writing it: it counts as missing and runs again)."""
    results: list[TrialResult] = []
    notes: list[str] = []
    for path in sorted(job_dir.glob(f"*/{RESULT_FILE}")):
        try:
            result = TrialResult.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            notes.append(f"{path}: unreadable, run again ({type(exc).__name__})")
            continue
        if result.job_id == job_id:
            results.append(result)
    return results, notes


def chains_of(results: Sequence[TrialResult]) -> list[Chain]:
    """The results grouped into chains (an attempt and its reruns), oldest chain first."""
    grouped: dict[str, list[TrialResult]] = defaultdict(list)
    for result in results:
        grouped[chain_position(result)[0]].append(result)
    chains = [
        Chain(base, sorted(members, key=lambda r: (chain_position(r)[1], r.started_at)))
        for base, members in grouped.items()
    ]
    return sorted(chains, key=lambda c: (c.results[0].started_at, c.base_id))


def match_chains(
    slots: Sequence[tuple[str, int]], chains: Sequence[Chain]
) -> tuple[list[Chain | None], list[Chain]]:
    """For each slot (task name, attempt), in order, the chain of results it has (None: it
    never finished a trial); and the chains no slot claims (kept as they are)."""
    free: dict[tuple[str, int], list[Chain]] = defaultdict(list)
    for chain in chains:
        last = chain.results[-1]
        free[(last.task_name, last.attempt)].append(chain)
    matched = [free[slot].pop(0) if free.get(slot) else None for slot in slots]
    return matched, [chain for left in free.values() for chain in left]
