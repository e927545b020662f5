"""Trials on a two-node Ray cluster whose nodes drive two different Docker engines.

Shown here: trials land on both engines and come back with their files, no node holds more
trials than its cores allow, an image is built once and pulled by the other engine; a cancel
and an abort reach trials on both engines; a node killed mid-job fails only its own trials,
as infra, which a retry runs again on another node, and what it left is reaped through
the cluster; a node whose engine stops answering is left out while the others serve.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from orchestrator import (
    Backoff,
    RolloutRequest,
    TrialEngine,
    TrialResult,
    abort,
    run_job,
)
from orchestrator.common.ids import trial_id_for
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.service.engine import engines
from tests.conftest import BASE_IMAGE, OFFICIAL_IMAGE, TEST_OWNER, write_task
from tests.ray.conftest import HALF_NODE_TOML, NODE_CPUS, WHOLE_NODE_TOML, TwoEngines, registry_has
from tests.ray.second_dockerd import SecondDockerd

pytestmark = pytest.mark.ray

# One image for the session, new to both engines and to the registry (a label of its own).
DOCKERFILE = f"FROM {OFFICIAL_IMAGE}\nWORKDIR /app\nLABEL trialbox.test={uuid.uuid4().hex}\n"
ARTIFACT = "#!/bin/sh\nsleep 2\necho made-on-a-node > /logs/artifacts/out.txt\n"


def on_disk(result: TrialResult) -> TrialResult:
    return TrialResult.model_validate_json((Path(result.trial_dir) / "result.json").read_text())


def most_at_once(results: list[TrialResult]) -> int:
    """The most of these trials that ran at the same moment."""
    edges = [(r.started_at, 1) for r in results] + [(r.finished_at, -1) for r in results]
    running = peak = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        running += step
        peak = max(peak, running)
    return peak


async def until(check: Callable[[], bool], *, within: float = 120.0) -> None:
    """Wait for a state (never a fixed sleep); fail after `within` seconds."""
    async with asyncio.timeout(within):
        while True:
            if await run_blocking(check):
                return
            await asyncio.sleep(0.1)


def running_on(two: TwoEngines, job_id: str) -> tuple[int, int]:
    """How many of the job's sandboxes run on each engine."""
    labels = {"label": [f"trialbox.job={job_id}"], "status": "running"}
    return len(two.first.containers.list(ignore_removed=True, filters=labels)), len(
        two.second.containers.list(ignore_removed=True, filters=labels)
    )


def agents_on(two: TwoEngines, job_id: str, command: str = "sleep 300") -> tuple[int, int]:
    """How many of the job's sandboxes on each engine run their agent's process already."""
    labels = {"label": [f"trialbox.job={job_id}"], "status": "running"}

    def busy(container: Any) -> bool:
        try:
            return any(command in " ".join(p) for p in container.top()["Processes"] or [])
        except docker.errors.APIError:  # gone meanwhile
            return False

    first = sum(busy(c) for c in two.first.containers.list(ignore_removed=True, filters=labels))
    return first, sum(
        busy(c) for c in two.second.containers.list(ignore_removed=True, filters=labels)
    )


async def test_trials_land_on_both_engines_and_come_back_with_their_files(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks", "spread", dockerfile=DOCKERFILE, task_toml=HALF_NODE_TOML,
        solve_sh=ARTIFACT,
    )  # fmt: skip
    job = await run_job(
        [task], "oracle", attempts=6, n_concurrent=6, config=two_engines.config(tmp_path)
    )
    assert [t.status for t in job.trials] == ["success"] * 6, [t.error for t in job.trials]
    assert {t.node.engine for t in job.trials if t.node} == {
        two_engines.first_host,
        two_engines.second_host,
    }
    for trial in job.trials:
        folder = Path(trial.trial_dir)
        assert folder.parent == (tmp_path / "jobs" / job.job_id).resolve()
        assert (folder / "logs" / "artifacts" / "out.txt").read_text() == "made-on-a-node\n"
        assert on_disk(trial).node == trial.node
    for engine in (two_engines.first_host, two_engines.second_host):
        on_it = [t for t in job.trials if t.node and t.node.engine == engine]
        assert most_at_once(on_it) <= NODE_CPUS  # one cpu each: a node holds two
    tag = job.trials[0].image_tag
    assert tag is not None and registry_has(tag)
    # Built once and pulled by the other engine: the very same image on both.
    assert two_engines.first.images.get(tag).id == two_engines.second.images.get(tag).id


async def test_a_cancel_an_abort_and_a_shutdown_reach_trials_on_both_engines(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    task = write_task(tmp_path / "tasks", "held", dockerfile=DOCKERFILE, task_toml=WHOLE_NODE_TOML)
    config = two_engines.config(tmp_path)
    async with TrialEngine(
        config=config, task=task, agent="command:sleep 300", n_concurrent=4
    ) as engine:
        for rollout_id in ("cancel::1", "cancel::2"):
            await engine.submit(RolloutRequest(rollout_id=rollout_id))
        await until(lambda: agents_on(two_engines, engine.job_id) == (1, 1))
        assert engine.status("cancel::1").status == "running"
        polled = asyncio.ensure_future(engine.watch("cancel::1", 25))
        cancelled = await engine.cancel(prefix="cancel::")
        assert cancelled == {"cancel::1": "cancelled_running", "cancel::2": "cancelled_running"}
        assert (await polled).status == "cancelled"  # the long poll woke on the change
        assert running_on(two_engines, engine.job_id) == (0, 0)

        for rollout_id in ("abort::1", "abort::2"):
            await engine.submit(RolloutRequest(rollout_id=rollout_id, session_id="surplus"))
        await until(lambda: agents_on(two_engines, engine.job_id) == (1, 1))
        settled = [asyncio.ensure_future(engine.wait(i)) for i in ("abort::1", "abort::2")]
        abort("surplus")
        results = await asyncio.gather(*settled)
        assert running_on(two_engines, engine.job_id) == (0, 0)

        for rollout_id in ("shutdown::1", "shutdown::2"):
            await engine.submit(RolloutRequest(rollout_id=rollout_id))
        await until(lambda: agents_on(two_engines, engine.job_id) == (1, 1))
        await engine.shutdown(drain_sec=0)
        assert running_on(two_engines, engine.job_id) == (0, 0)

    ids = ("cancel::1", "cancel::2", "abort::1", "abort::2", "shutdown::1", "shutdown::2")
    job_dir = config.jobs_dir.resolve() / engine.job_id
    written = [
        TrialResult.model_validate_json((job_dir / trial_id_for(i) / "result.json").read_text())
        for i in ids
    ]
    assert [w.status for w in written] == ["cancelled"] * 6
    assert [w.agent.termination for w in written] == ["aborted"] * 6
    for pair in (written[:2], written[2:4], written[4:]):
        assert {w.node.engine for w in pair if w.node} == {
            two_engines.first_host,
            two_engines.second_host,
        }
    assert [r.status for r in results] == ["cancelled", "cancelled"]


async def test_a_node_killed_mid_job_fails_only_its_trials_and_they_run_again_elsewhere(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    third = two_engines.add_node(two_engines.second_host)
    task = write_task(
        tmp_path / "tasks", "doomed", dockerfile=DOCKERFILE, task_toml=WHOLE_NODE_TOML
    )
    config = two_engines.config(tmp_path)
    job = asyncio.create_task(
        run_job(
            [task],
            "command:sleep 8",
            attempts=3,
            n_concurrent=3,
            max_retries=1,
            retry_backoff=Backoff(0, 0),
            config=config,
        )
    )
    try:

        def on_third() -> bool:
            for engine in engines():
                for rollout in engine._book.live.values():
                    node = rollout.live.node if rollout.live is not None else None
                    if node is not None and node.node_id == third.node_id:
                        return running_on(two_engines, engine.job_id)[1] >= 2
            return False

        await until(on_third)
        await run_blocking(two_engines.cluster.remove_node, third)
        third = None
        record = await job
    finally:
        if third is not None:
            await run_blocking(two_engines.cluster.remove_node, third)
        if not job.done():
            job.cancel()

    [lost] = record.superseded
    assert lost.status == "failure" and lost.error is not None
    assert lost.error.category == "infra" and lost.error.type == "SandboxLostError"
    assert lost.node is not None and "was lost" in lost.error.message
    assert [t.status for t in record.trials] == ["success"] * 3
    assert all(t.node is not None and t.node.node_id != lost.node.node_id for t in record.trials)

    # The dead node could not tear its sandbox down: reaping through the cluster finds it (the
    # second engine is still driven by a live node) and removes it.
    from orchestrator.executors.ray.cluster import RayCluster  # needs Ray: not at collection

    assert isinstance(config.backend, RayBackendConfig)
    backend = RayCluster(config.backend, config.limits)
    left = await backend.find_leftovers(owner=TEST_OWNER, job=record.job_id)
    assert [item.trial for item in left] == [lost.trial_id]
    assert await backend.remove_leftovers(left) == 1
    assert await backend.find_leftovers(owner=TEST_OWNER, job=record.job_id) == []


async def test_a_node_whose_engine_stops_answering_is_left_out_and_its_trials_run_elsewhere(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    third = SecondDockerd()
    third.start()
    node = None
    try:
        third.load_image(BASE_IMAGE)
        node = two_engines.add_node(third.host)
        task = write_task(
            tmp_path / "tasks", "fragile", dockerfile=DOCKERFILE, task_toml=WHOLE_NODE_TOML
        )
        config = two_engines.config(tmp_path)
        before = await run_job([task], "nop", attempts=3, n_concurrent=3, config=config)
        assert {t.node.engine for t in before.trials if t.node} == {
            two_engines.first_host,
            two_engines.second_host,
            third.host,
        }
        third.stop()  # the third node lives on; its engine is gone
        after = await run_job(
            [task], "nop", attempts=4, n_concurrent=3, max_retries=3,
            retry_backoff=Backoff(0, 0), config=config,
        )  # fmt: skip
    finally:
        if node is not None:
            await run_blocking(two_engines.cluster.remove_node, node)
        third.stop()
    assert [t.status for t in after.trials] == ["success"] * 4
    assert third.host not in {t.node.engine for t in after.trials if t.node}
    assert after.superseded, "no trial was placed on the node whose engine had stopped"
    for lost in after.superseded:
        assert lost.error is not None and lost.error.category == "infra"


async def test_each_node_keeps_its_own_warm_pool_and_removes_it_at_shutdown(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    task = write_task(tmp_path / "tasks", "pooled", dockerfile=DOCKERFILE,
                      task_toml=HALF_NODE_TOML)  # fmt: skip
    config = two_engines.config(tmp_path, warm_pool=1)
    job = await run_job([task], "nop", attempts=8, n_concurrent=2, config=config)
    assert [t.status for t in job.trials] == ["success"] * 8, [t.error for t in job.trials]
    # A node's first trial of the shape makes its sandbox; later ones there may take one.
    assert any(t.sandbox_from_pool for t in job.trials)
    for engine in (two_engines.first_host, two_engines.second_host):
        on_it = [t for t in job.trials if t.node and t.node.engine == engine]
        assert not on_it or not min(on_it, key=lambda t: t.started_at).sandbox_from_pool
    # The job's end closed the nodes' pools: none of its sandboxes is left on either engine.
    assert running_on(two_engines, job.job_id) == (0, 0)
