"""How much trialbox adds to the container work a trial cannot avoid.

Builds a trivial task's image once, then runs N trials (nop agent, a verifier that writes 1)
through `run_trial`, sequentially and at concurrency 4, and in the same run the same container
operations straight through the docker SDK (create, start, upload input, exec agent, exec
verifier, download /logs, stop, remove): the floor. Prints p50/p95 per trial, trials per
second, and trialbox's ratios to the floor.

    python benchmarks/trial_overhead.py [-n 20] [--base-image FROM=LOCAL]

Targets: sequential p50 within 1.5x of the floor's; throughput at concurrency 4 at least
0.7x the floor's.
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

import docker
from bench_common import DEFAULT_MAP, make_task, percentile

from orchestrator import TrialConfig, load_task, run_trial
from orchestrator.backends.docker.images import default_builder
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


def floor_trial(client: docker.DockerClient, image: str, payload: bytes) -> float:
    """The container operations of one trial, with nothing around them."""
    started = time.perf_counter()
    container = client.containers.create(
        image, entrypoint=["sleep"], command=["infinity"], init=True, detach=True,
        labels={"trialbox.trial": "floor"}, network_mode="none", nano_cpus=10**9,
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


def report(name: str, durations: list[float], wall: float) -> dict[str, float]:
    row = {
        "p50": statistics.median(durations),
        "p95": percentile(durations, 0.95),
        "tps": len(durations) / wall,
    }
    print(
        f"{name:<28} p50 {row['p50'] * 1000:7.0f} ms   p95 {row['p95'] * 1000:7.0f} ms   "
        f"{row['tps']:5.2f} trials/s"
    )
    return row


def run_floor(n: int, concurrency: int, job: Callable[[], float]) -> tuple[list[float], float]:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        durations = list(pool.map(lambda _: job(), range(n)))
    return durations, time.perf_counter() - started


async def run_trialbox(n: int, concurrency: int, task_path: Path, config: TrialConfig):
    task = load_task(task_path)
    slots = asyncio.Semaphore(concurrency)

    async def one() -> float:
        async with slots:
            result = await run_trial(task, "nop", config=config)
        if result.status != "success":
            raise RuntimeError(f"benchmark trial failed: {result.error}")
        return result.timings.total

    started = time.perf_counter()
    durations = await asyncio.gather(*(one() for _ in range(n)))
    return list(durations), time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="trials per measurement (default 20)")
    parser.add_argument("--base-image", default=DEFAULT_MAP, help=f"default {DEFAULT_MAP}")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = TrialConfig(
            jobs_dir=root / "jobs", base_image_map=parse_image_map(args.base_image)
        )
        task_path = make_task(root)
        image = (
            await default_builder().ensure_image(load_task(task_path), config.base_image_map)
        ).tag
        client = docker.from_env(max_pool_size=16)
        payload = input_tar()
        floor_job = lambda: floor_trial(client, image, payload)  # noqa: E731

        # Warm both paths once so neither pays a first-call cost inside the measurement.
        floor_job()
        await run_trialbox(1, 1, task_path, config)

        print(f"image {image}, {args.n} trials per row\n")
        rows = {}
        rows["floor seq"] = report("floor (docker SDK), seq", *run_floor(args.n, 1, floor_job))
        rows["tb seq"] = report("trialbox, seq", *await run_trialbox(args.n, 1, task_path, config))
        rows["floor c4"] = report("floor (docker SDK), conc 4", *run_floor(args.n, 4, floor_job))
        rows["tb c4"] = report(
            "trialbox, conc 4", *await run_trialbox(args.n, 4, task_path, config)
        )

    seq_ratio = rows["tb seq"]["p50"] / rows["floor seq"]["p50"]
    tps_ratio = rows["tb c4"]["tps"] / rows["floor c4"]["tps"]
    print()
    print(f"sequential p50: trialbox / floor = {seq_ratio:.2f}x   (target <= 1.5x)")
    print(f"throughput at 4: trialbox / floor = {tps_ratio:.2f}x   (target >= 0.7x)")


if __name__ == "__main__":
    asyncio.run(main())
