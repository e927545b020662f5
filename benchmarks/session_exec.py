"""A command through an open channel against the docker SDK's own exec floor.

Starts one sandbox (`DockerSandbox`, the base image as it is: no build), writes a 1 MiB file
into it, opens a command channel (`DockerSandbox.open_channel`), then, in rounds so drift hits
every row alike: the SDK's `exec_run` of `true` and of `cat` of the file (the floor: one engine
exec each), the channel's `run` of the same, and trialbox's plain `Sandbox.exec` of `true`.
Prints p50/p90 per command and each row's p50 as a ratio of its floor's.

    python benchmarks/session_exec.py [-n 30] [--image trialbox-base/python3:bookworm]

Target: the channel's `true` at most a fifth of the SDK's `exec_run` of `true` at p50.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
from collections.abc import Awaitable, Callable

import docker
from bench_common import percentile

from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.common.ids import new_id
from orchestrator.sandbox import SandboxSpec

BIG = "/tmp/bench-1mib"
MIB = 1 << 20


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="runs per row (default 30, at most 1000)")
    parser.add_argument("--image", default="trialbox-base/python3:bookworm")
    args = parser.parse_args()
    runs = max(1, min(args.n, 1000))

    spec = SandboxSpec(
        image=args.image, trial_id=new_id("bench-session"), job_id=new_id("job-bench"),
        owner=os.environ.get("TRIALBOX_OWNER", "trialbox-bench"),
    )  # fmt: skip
    sandbox = await DockerSandbox.create(spec)
    try:
        payload = os.urandom(MIB)
        await sandbox.upload_file(BIG, payload, mode=0o644)
        container = docker.from_env().containers.get(sandbox.container_id)
        channel = await sandbox.open_channel()
        if channel is None:
            raise SystemExit("the channel could not start in this image")
        check = await channel.run(["cat", BIG], output_cap=MIB)
        assert hashlib.sha256(check.stdout).digest() == hashlib.sha256(payload).digest()

        def sdk(argv: list[str]) -> Callable[[], Awaitable[object]]:
            return lambda: asyncio.to_thread(container.exec_run, argv)

        rows: dict[str, Callable[[], Awaitable[object]]] = {
            "sdk exec_run: true": sdk(["true"]),
            "channel run: true": lambda: channel.run("true"),
            "trialbox exec: true": lambda: sandbox.exec("true", timeout_sec=30),
            "sdk exec_run: cat 1 MiB": sdk(["cat", BIG]),
            "channel run: cat 1 MiB": lambda: channel.run(["cat", BIG], output_cap=MIB),
        }
        floors = {"true": "sdk exec_run: true", "cat 1 MiB": "sdk exec_run: cat 1 MiB"}
        times: dict[str, list[float]] = {name: [] for name in rows}
        for call in rows.values():  # warm both paths once
            await call()
        for _ in range(runs):
            for name, call in rows.items():
                times[name].append(await timed(call))
        await channel.close()
    finally:
        await sandbox.destroy()

    print(f"{runs} runs per row, rows interleaved; image {args.image}")
    print(f"{'':26} {'p50':>9} {'p90':>9} {'p50 / floor':>12}")
    for name, values in times.items():
        floor = times[floors[name.split(": ", 1)[1]]]
        p50 = percentile(values, 0.5)
        ratio = p50 / percentile(floor, 0.5)
        print(f"{name:26} {p50 * 1e3:7.1f}ms {percentile(values, 0.9) * 1e3:7.1f}ms {ratio:11.2f}x")
    target = percentile(times["channel run: true"], 0.5) / percentile(
        times["sdk exec_run: true"], 0.5
    )
    print(f"channel / sdk floor for `true` at p50: {target:.3f} (target <= 0.2)")


if __name__ == "__main__":
    asyncio.run(main())
