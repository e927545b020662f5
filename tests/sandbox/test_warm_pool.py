"""Warm pools (sandbox/pool.py): through the fake backend for the pool's logic, on Docker for
what the engine decides (a rename, the engine's own account of a pristine container, labels
`reap` finds, nothing left behind)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Limits, TrialConfig, run_trial
from orchestrator.backends.fake import ExecCall, FakeBackend, FakeSandbox
from orchestrator.sandbox import Sandbox, SandboxSpec
from orchestrator.sandbox.pool import POOL_PREFIX, PooledBackend
from orchestrator.trials.result import TrialResult
from tests.conftest import write_task

QUICK = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)
JOB = "pool-job"


def fake_config(tmp_path: Path, **changes: Any) -> TrialConfig:
    fields: dict[str, Any] = {"jobs_dir": tmp_path / "jobs", "backend": {"type": "fake"}}
    return TrialConfig(**(fields | {"limits": QUICK} | changes))


def present(fake: FakeBackend) -> list[FakeSandbox]:
    return [s for s in fake.created if s.present]


async def trials(tmp_path: Path, pool: PooledBackend, n: int, **config: Any) -> list[TrialResult]:
    """`n` trials of one task, one after the other, the pool refilled between them."""
    folder = write_task(tmp_path / "tasks", "pooled")
    results = []
    for _ in range(n):
        results.append(
            await run_trial(
                folder, "nop", config=fake_config(tmp_path, **config), backend=pool, job_id=JOB
            )
        )
        await pool.wait_filled()
    return results


async def test_later_trials_take_pooled_sandboxes_and_none_is_handed_out_twice(
    tmp_path: Path,
) -> None:
    fake = FakeBackend(QUICK)
    pool = PooledBackend(fake, size=1)
    results = await trials(tmp_path, pool, 4)
    assert [r.reward for r in results] == [1.0] * 4
    # The first trial teaches the pool its shape; every later one takes a waiting sandbox.
    assert [r.sandbox_from_pool for r in results] == [False, True, True, True]
    taken = [s for s in fake.created if s.adopted]
    assert len(taken) == 3 and len({id(s) for s in taken}) == 3
    # Taken, a sandbox bears its trial's name; waiting, its id was the pool's.
    assert sorted(s.spec.trial_id for s in taken) == sorted(r.trial_id for r in results[1:])
    waiting = [s for s in present(fake) if not s.adopted]
    assert len(waiting) == 1 and waiting[0].spec.trial_id.startswith(POOL_PREFIX + "__")
    await pool.aclose()
    assert present(fake) == []


async def test_a_sandbox_something_ran_in_is_never_handed_out(tmp_path: Path) -> None:
    fake = FakeBackend(QUICK)
    pool = PooledBackend(fake, size=1)
    await trials(tmp_path, pool, 1)
    (waiting,) = [s for s in present(fake) if not s.adopted]
    await waiting.exec("true")  # someone ran something in it
    (second,) = await trials(tmp_path / "again", pool, 1)
    assert second.reward == 1.0 and not second.sandbox_from_pool
    assert not waiting.present  # removed, not handed out
    await pool.aclose()
    assert present(fake) == []


async def test_a_pool_is_refilled_and_bounded_by_count_and_memory(tmp_path: Path) -> None:
    fake = FakeBackend(QUICK)
    pool = PooledBackend(fake, size=3, max_sandboxes=2)
    await trials(tmp_path, pool, 1)
    assert pool.idle == 2  # bounded by max_sandboxes, not the size
    await pool.aclose()

    small = FakeBackend(QUICK, memory_mb=4096)
    pool = PooledBackend(small, size=3)
    await trials(tmp_path / "small", pool, 1)  # the task asks 2048 MiB: room for two
    assert pool.idle == 2
    await pool.aclose()
    assert present(small) == []


async def test_credentials_and_env_reach_a_pooled_sandbox_and_no_other_trial_s(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, str]] = []

    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        seen.append((call.env.get("MY_KEY", ""), call.env.get("TASK_VAR", "")))
        return 0

    fake = FakeBackend(QUICK, agent=agent)
    pool = PooledBackend(fake, size=1)
    folder = write_task(
        tmp_path / "tasks", "env", task_toml='[environment.env]\nTASK_VAR = "from-task"\n'
    )
    results = []
    for key in ("sk-first-key-000000", "sk-second-key-11111"):
        config = fake_config(tmp_path, credentials={"MY_KEY": key})
        results.append(await run_trial(folder, "nop", config=config, backend=pool, job_id=JOB))
        await pool.wait_filled()
    assert [r.sandbox_from_pool for r in results] == [False, True]
    assert seen == [("sk-first-key-000000", "from-task"), ("sk-second-key-11111", "from-task")]
    await pool.aclose()


async def test_a_cancelled_trial_holding_a_pooled_sandbox_leaves_nothing(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()
    hold = False

    async def agent(sandbox: FakeSandbox, call: ExecCall) -> int:
        if hold:  # the second trial's agent works until cancelled
            started.set()
            await asyncio.sleep(60)
        return 0

    fake = FakeBackend(QUICK, agent=agent)
    pool = PooledBackend(fake, size=1)
    await trials(tmp_path, pool, 1)
    hold = True
    folder = write_task(tmp_path / "tasks2", "pooled")
    running = asyncio.ensure_future(
        run_trial(folder, "nop", config=fake_config(tmp_path), backend=pool, job_id=JOB)
    )
    await asyncio.wait_for(started.wait(), 10)
    holder = next(s for s in fake.created if s.adopted)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not holder.present
    await pool.aclose()
    assert present(fake) == []


async def test_a_closed_pool_removes_what_it_was_still_making(tmp_path: Path) -> None:
    fake = FakeBackend(QUICK)
    pool = PooledBackend(fake, size=2)
    await trials(tmp_path, pool, 1)
    await pool.aclose()  # refills may be under way: each is removed once made
    assert present(fake) == []
    # A closed pool still serves trials, each with a sandbox of its own.
    (late,) = await trials(tmp_path / "late", pool, 1)
    assert late.reward == 1.0 and not late.sandbox_from_pool
    assert present(fake) == []


@pytest.mark.docker
async def test_on_docker_a_pooled_container_is_renamed_counted_found_and_removed(
    config: TrialConfig, tmp_path: Path
) -> None:
    from orchestrator.backends.docker.backend import DockerBackend
    from orchestrator.backends.docker.sandbox import DockerSandbox

    inner = DockerBackend(config.limits)
    pool = PooledBackend(inner, size=1)
    folder = write_task(tmp_path / "tasks", "pooled-docker")
    try:
        first = await run_trial(folder, "nop", config=config, backend=pool, job_id=JOB)
        await pool.wait_filled()
        # Waiting: labelled like any sandbox of this owner and job, found by reap's query.
        waiting = {x.name: x for x in await inner.find_leftovers(owner=config.owner, job=JOB)}
        assert len(waiting) == 1
        (leftover,) = waiting.values()
        assert leftover.trial.startswith(POOL_PREFIX + "__") and leftover.creator is not None
        # The agent reads its input where it always is: here, links into the slot folder.
        reader = "command:cat /logs/agent/instruction.md > /logs/artifacts/seen.txt"
        second = await run_trial(folder, reader, config=config, backend=pool, job_id=JOB)
        await pool.wait_filled()
        third = await run_trial(folder, reader, config=config, backend=pool, job_id=JOB)
    finally:
        await pool.aclose()
    for result in (second, third):
        seen = Path(result.trial_dir) / "logs" / "artifacts" / "seen.txt"
        assert seen.read_text() == "Do the thing.\n"
        assert result.sandbox_from_pool and result.reward == 1.0
    assert (first.reward, second.reward) == (1.0, 1.0)
    assert (first.sandbox_from_pool, second.sandbox_from_pool) == (False, True)
    # Counted per trial: the take renamed it, and no create was the trial's.
    assert second.engine_calls.by_kind.get("POST /containers/{id}/rename") == 1
    assert "POST /containers/create" not in second.engine_calls.by_kind
    assert first.engine_calls.by_kind.get("POST /containers/create", 0) >= 1
    assert second.engine_calls.total == sum(second.engine_calls.by_kind.values())
    assert await inner.find_leftovers(owner=config.owner, job=JOB) == []
    # An exec from outside makes a waiting container unfit (the engine's own account).
    spec = SandboxSpec(image=first.image_tag or "", trial_id="pool__x", job_id=JOB,
                       owner=config.owner)  # fmt: skip
    sandbox = await inner.create_sandbox(spec)
    try:
        assert isinstance(sandbox, DockerSandbox)
        assert await sandbox.pristine()
        await sandbox.exec("true")
        assert not await sandbox.pristine()
    finally:
        await sandbox.destroy()


class SlowCreates(FakeBackend):
    """A fake whose creates take a while, as an engine's do."""

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        await asyncio.sleep(0.3)
        return await super().create_sandbox(spec)


async def test_a_trial_that_finds_a_refill_under_way_waits_for_it(tmp_path: Path) -> None:
    """The refill after a take is slower than the next trial's arrival: that trial takes the
    refill once made, rather than create a sandbox of its own."""
    fake = SlowCreates(QUICK)
    pool = PooledBackend(fake, size=1)
    folder = write_task(tmp_path / "tasks", "refilling")
    config = fake_config(tmp_path)
    first = await run_trial(folder, "nop", config=config, backend=pool, job_id=JOB)
    await pool.wait_filled()
    second = await run_trial(folder, "nop", config=config, backend=pool, job_id=JOB)
    third = await run_trial(folder, "nop", config=config, backend=pool, job_id=JOB)  # at once

    assert [r.reward for r in (first, second, third)] == [1.0] * 3
    assert (second.sandbox_from_pool, third.sandbox_from_pool) == (True, True)
    assert len(fake.created) == 3  # the first trial's, and two pooled; none made in passing
    await pool.aclose()
    assert present(fake) == []
