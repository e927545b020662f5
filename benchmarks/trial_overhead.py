"""How much trialbox adds to the container work a trial cannot avoid.

Builds a trivial task's image once, then runs N trials (nop agent, a verifier that writes 1)
through `run_trial`, sequentially and at concurrency 4, and in the same run the same container
operations straight through the docker SDK (create, start, upload input, exec agent, exec
verifier, download /logs, stop, remove): the floor. Both containers get the task's network:
a bridge network by default (as Harbor gives a task that declares none), none with
`--network none` (the task then says `allow_internet = false`); a bridge costs the engine
about 40 ms more per container on this machine, at its removal. Then the same trials with a
warm pool (`PooledBackend`, as many sandboxes per shape as the concurrency), sequentially and
at concurrency 4 and 8. Prints p50/p95 per trial, trials per second, the start phase's p50, the
engine requests per trial (trialbox's from `result.engine_calls`, the floor's counted on its
client), and trialbox's ratios to the floor.

    python benchmarks/trial_overhead.py [-n 20] [--network public|none] [--base-image FROM=LOCAL]

Targets (issue 23): without a pool, sequential p50 at most 1.25x the floor's and throughput at
concurrency 4 at least 0.85x; with a pool, sequential p50 at most the floor's (1.0x) and the
start phase's p50 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
from bench_common import DEFAULT_MAP, make_task, percentile

from orchestrator import TrialConfig, load_task, run_trial
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.images import default_builder
from orchestrator.sandbox import Backend
from orchestrator.sandbox.pool import PooledBackend
from orchestrator.trials.config import parse_image_map


def input_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in ("logs", "logs/agent", "logs/verifier"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o777
            archive.addfile(info)
        data = b'{"trial_id": "floor", "instruction": "Do nothing."}'
        info = tarfile.TarInfo("logs/agent/container_input.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def floor_trial(
    client: docker.DockerClient, image: str, payload: bytes, network_mode: str = "bridge"
) -> float:
    """The container operations of one trial, with nothing around them."""
    started = time.perf_counter()
    container = client.containers.create(
        image, entrypoint=["sleep"], command=["infinity"], init=True, detach=True,
        labels={"trialbox.trial": "floor"}, network_mode=network_mode, nano_cpus=10**9,
        mem_limit="2048m", pids_limit=1024, security_opt=["no-new-privileges"],
    )  # fmt: skip
    try:
        container.start()
        container.put_archive("/", payload)
        container.exec_run(["sh", "-c", "exec >/logs/agent/stdout.txt 2>&1; true"])
        container.exec_run(["sh", "-c", "echo 1 > /logs/verifier/reward.txt"])
        stream, _ = container.get_archive("/logs")
        for _chunk in stream:
            pass
        container.stop(timeout=0)
    finally:
        container.remove(force=True)
    return time.perf_counter() - started


class Row:
    """One measurement: per-trial durations, wall time, start phases, engine requests."""

    def __init__(self, durations: list[float], wall: float, starts: list[float], calls: float):
        self.durations, self.wall, self.starts, self.calls = durations, wall, starts, calls

    @property
    def p50(self) -> float:
        return statistics.median(self.durations)

    @property
    def tps(self) -> float:
        return len(self.durations) / self.wall


def report(name: str, row: Row) -> Row:
    start = f"start p50 {statistics.median(row.starts) * 1000:5.0f} ms" if row.starts else ""
    print(
        f"{name:<30} p50 {row.p50 * 1000:6.0f} ms   p95 "
        f"{percentile(row.durations, 0.95) * 1000:6.0f} ms   {row.tps:5.2f} trials/s   "
        f"{row.calls:5.1f} requests/trial   {start}"
    )
    return row


def run_floor(n: int, concurrency: int, job: Callable[[], float], sent: list[int]) -> Row:
    before = sent[0]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        durations = list(pool.map(lambda _: job(), range(n)))
    return Row(durations, time.perf_counter() - started, [], (sent[0] - before) / n)


async def run_trialbox(
    n: int, concurrency: int, task_path: Path, config: TrialConfig, backend: Backend
) -> Row:
    task = load_task(task_path)
    slots = asyncio.Semaphore(concurrency)
    starts: list[float] = []
    calls: list[int] = []

    async def one() -> float:
        async with slots:
            result = await run_trial(task, "nop", config=config, backend=backend, job_id="bench")
        if result.status != "success":
            raise RuntimeError(f"benchmark trial failed: {result.error}")
        starts.append(result.timings.start)
        calls.append(result.engine_calls.total)
        return result.timings.total

    started = time.perf_counter()
    durations = await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - started
    return Row(list(durations), wall, starts, statistics.mean(calls))


async def pooled(n: int, concurrency: int, task_path: Path, config: TrialConfig) -> Row:
    """The trials with a warm pool of `concurrency` per shape, filled before the clock."""
    pool = PooledBackend(DockerBackend(config.limits), size=concurrency)
    try:
        await run_trialbox(1, 1, task_path, config, pool)  # the pool learns the shape
        await pool.wait_filled()
        return await run_trialbox(n, concurrency, task_path, config, pool)
    finally:
        await pool.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="trials per measurement (default 20)")
    parser.add_argument("--base-image", default=DEFAULT_MAP, help=f"default {DEFAULT_MAP}")
    parser.add_argument(
        "--network", choices=("public", "none"), default="public",
        help="the task's network, the floor's too (default public: a bridge network)",
    )  # fmt: skip
    args = parser.parse_args()
    network_mode = "bridge" if args.network == "public" else "none"

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = TrialConfig(
            jobs_dir=root / "jobs", base_image_map=parse_image_map(args.base_image)
        )
        task_path = make_task(root, network=args.network == "public")
        image = (
            await default_builder().ensure_image(load_task(task_path), config.base_image_map)
        ).tag
        client = docker.from_env(max_pool_size=16)
        sent = [0]
        send = client.api.send

        def counted(request: Any, **kwargs: Any) -> Any:
            sent[0] += 1
            return send(request, **kwargs)

        client.api.send = counted  # the floor's requests, counted as trialbox's are
        payload = input_tar()
        floor_job = lambda: floor_trial(client, image, payload, network_mode)  # noqa: E731
        plain = DockerBackend(config.limits)

        # Warm both paths once so neither pays a first-call cost inside the measurement.
        floor_job()
        await run_trialbox(1, 1, task_path, config, plain)

        print(f"image {image}, network {network_mode}, {args.n} trials per row\n")
        n = args.n
        floor_seq = report("floor (docker SDK), seq", run_floor(n, 1, floor_job, sent))
        tb_seq = report("trialbox, seq", await run_trialbox(n, 1, task_path, config, plain))
        pool_seq = report("trialbox + pool, seq", await pooled(n, 1, task_path, config))
        floor_c4 = report("floor (docker SDK), conc 4", run_floor(n, 4, floor_job, sent))
        tb_c4 = report("trialbox, conc 4", await run_trialbox(n, 4, task_path, config, plain))
        pool_c4 = report("trialbox + pool, conc 4", await pooled(n, 4, task_path, config))
        floor_c8 = report("floor (docker SDK), conc 8", run_floor(n, 8, floor_job, sent))
        pool_c8 = report("trialbox + pool, conc 8", await pooled(n, 8, task_path, config))

    print()
    print(f"sequential p50: trialbox / floor = {tb_seq.p50 / floor_seq.p50:.2f}x (target <= 1.25x)")
    print(f"throughput at 4: trialbox / floor = {tb_c4.tps / floor_c4.tps:.2f}x (target >= 0.85x)")
    print(
        f"with a pool: sequential p50 / floor = {pool_seq.p50 / floor_seq.p50:.2f}x "
        f"(target <= 1.0x), start p50 {statistics.median(pool_seq.starts) * 1000:.0f} ms "
        "(target < 50 ms)"
    )
    print(f"with a pool: throughput at 4 / floor = {pool_c4.tps / floor_c4.tps:.2f}x, at 8 = "
          f"{pool_c8.tps / floor_c8.tps:.2f}x")  # fmt: skip
    print(
        f"engine requests per trial: floor {floor_seq.calls:.0f}, trialbox {tb_seq.calls:.1f}, "
        f"with a pool {pool_seq.calls:.1f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
