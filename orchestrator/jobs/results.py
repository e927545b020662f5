"""What a resumed job still has to run, read from its trials' own `result.json` files.

A (task, attempt) whose last result is a sample (scored, or a failure of the agent, the
verifier or the task) is kept untouched. One whose last result ended in `infra` or was
cancelled runs again (the sample said nothing about the agent), and so does one with no
result at all: its trial was in flight when the job died.

`read_results` reads every trial's result.json back (a result an older trialbox wrote, without
trial.json, has its `.retryN` read once here); `chains_of` links them by `retry_of`;
`match_chains` pairs the chains with the job's (task, attempt) pairs; `needs_rerun` says what
`--resume` runs again.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from orchestrator.jobs.aggregates import is_infra
from orchestrator.jobs.record import Chain, retry_id
from orchestrator.trials.result import TrialResult
from orchestrator.trials.spec import SPEC_FILE

RESULT_FILE = "result.json"


def needs_rerun(result: TrialResult) -> bool:
    """Infra failures and cancelled (or never settled) trials are run again."""
    return result.status not in ("success", "failure") or is_infra(result)


def read_results(job_dir: Path, job_id: str) -> tuple[list[TrialResult], list[str]]:
    """Every readable result.json of the job's trials, and a note for each unreadable one
    (a trial killed while writing it: it counts as missing and runs again)."""
    results: list[TrialResult] = []
    notes: list[str] = []
    legacy: list[TrialResult] = []
    for path in sorted(job_dir.glob(f"*/{RESULT_FILE}")):
        try:
            result = TrialResult.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            notes.append(f"{path}: unreadable, run again ({type(exc).__name__})")
            continue
        if result.job_id == job_id:
            results.append(result)
            if result.retry_of is None and not (path.parent / SPEC_FILE).exists():
                legacy.append(result)
    _link_legacy_reruns(legacy, results)
    return results, notes


_LEGACY_RETRY = re.compile(r"\.retry(\d+)$")


def _link_legacy_reruns(legacy: Sequence[TrialResult], results: Sequence[TrialResult]) -> None:
    """A result an older trialbox wrote (no trial.json, no `retry_of`) told its place in a
    chain only by its rollout id's `.retryN`: give it the `retry_of` it would carry now, so
    that no reader of a job parses ids. Applied to those results alone."""
    by_rollout = {r.rollout_id: r for r in results if r.rollout_id is not None}
    for result in legacy:
        found = _LEGACY_RETRY.search(result.rollout_id or "")
        if found is None:
            continue
        base, n = (result.rollout_id or "")[: found.start()], int(found.group(1))
        earlier = by_rollout.get(retry_id(base, n - 1))
        if earlier is not None:
            result.retry_of = earlier.trial_id


def chains_of(results: Sequence[TrialResult]) -> list[Chain]:
    """The results grouped into chains (a first try and the reruns that follow its
    `retry_of` links), each oldest first, oldest chain first."""
    by_trial = {r.trial_id: r for r in results}

    def first_try(result: TrialResult) -> TrialResult:
        seen = {result.trial_id}
        while result.retry_of in by_trial and result.retry_of not in seen:
            result = by_trial[result.retry_of]
            seen.add(result.trial_id)
        return result

    grouped: dict[str, list[TrialResult]] = defaultdict(list)
    roots: dict[str, TrialResult] = {}
    for result in results:
        root = first_try(result)
        roots[root.trial_id] = root
        grouped[root.trial_id].append(result)
    chains = [
        Chain(roots[key].rollout_id or key, sorted(members, key=lambda r: r.started_at))
        for key, members in grouped.items()
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
