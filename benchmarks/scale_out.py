"""What placing trials on a Ray cluster costs per trial, and what a second engine buys.

On this machine: a two-node Ray cluster (Ray's test utilities) whose head drives the system's
Docker engine and whose second node a second dockerd started here (the tests' own), with the
local registry between them. In one run, side by side:

1. Dispatch overhead: N trivial trials (nop agent, a verifier that writes 1) one after
   another through the local engine (`TrialEngine`, Docker backend) and through Ray onto the
   head's node alone (the same engine); the wall time of each trial from submit to settled.
   Target: Ray adds at most 50 ms at p50.
2. Throughput: M trials at concurrency C through Ray on one engine (the head's node) and on
   both engines; trials per second of each, and their ratio.

    python benchmarks/scale_out.py [-n 20] [-m 24] [-c 8] [--registry 127.0.0.1:5000]

Needs the ray extra, dockerd, the base image and the registry (scripts/setup.sh). Everything
binds to 127.0.0.1; the cluster, the second engine and the pushed images are removed at the
end. Both engines share this machine's cores, so the second engine adds slots, not cores.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1 only
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # one mode for every process (tests/conftest.py)

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_common import DEFAULT_MAP, make_task, percentile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' second dockerd

import ray
from ray.cluster_utils import Cluster

from orchestrator import RolloutRequest, TrialConfig, TrialEngine, load_task
from orchestrator.executors.ray.cluster import RayCluster
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.trials.config import parse_image_map
from tests.ray.second_dockerd import SecondDockerd

SLOTS = 8  # logical cpus per node: trials hold one each
NODE_MEMORY = 8 * 1024**3
TASK_TOML = "[environment]\ncpus = 1\nmemory_mb = 256\n[agent]\ntimeout_sec = 30\n"


async def one_trial(engine: TrialEngine, rollout_id: str) -> tuple[float, float]:
    """The trial's seconds from submit to settled, and the seconds it reported for its own
    phases where it ran: the rest is dispatch."""
    started = time.perf_counter()
    await engine.submit(RolloutRequest(rollout_id=rollout_id))
    result = await engine.wait(rollout_id)
    assert result.status == "success", result.error
    return time.perf_counter() - started, result.timings.total


async def alternating(
    engines: dict[str, TrialEngine], n: int
) -> dict[str, tuple[list[float], list[float]]]:
    """n trials through each engine, one at a time, taking turns (so drift in the machine's
    load falls on both alike)."""
    found: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in engines}
    for i in range(n):
        for name, engine in engines.items():
            wall, own = await one_trial(engine, f"{name}-{i}")
            found[name][0].append(wall)
            found[name][1].append(own)
    return found


async def throughput(engine: TrialEngine, m: int, tag: str) -> tuple[float, set[str]]:
    """Trials per second with the engine's concurrency, and the engines they ran on."""
    started = time.perf_counter()
    ids = [await engine.submit(RolloutRequest(rollout_id=f"{tag}-{i}")) for i in range(m)]
    results = await asyncio.gather(*(engine.wait(i) for i in ids))
    elapsed = time.perf_counter() - started
    assert all(r.status == "success" for r in results), [r.error for r in results]
    return m / elapsed, {r.node.engine for r in results if r.node is not None}


def engine_of(config: TrialConfig, task: Path, concurrency: int) -> TrialEngine:
    return TrialEngine(config=config, task=task, agent="nop", n_concurrent=concurrency)


def ray_config(base: TrialConfig, registry: str, labels: dict[str, str]) -> TrialConfig:
    backend = RayBackendConfig(registry=registry, node_labels=labels)
    return base.model_copy(update={"backend": backend})


def delete_pushed(registry: str, before: set[str]) -> None:
    for name in registry_tags(registry) - before:
        url = f"http://{registry}/v2/trialbox-env/manifests/{name}"
        accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
        with urllib.request.urlopen(
            urllib.request.Request(url, method="HEAD", headers=accept)
        ) as r:
            digest = r.headers["Docker-Content-Digest"]
        gone = urllib.request.Request(url.replace(name, digest), method="DELETE")
        urllib.request.urlopen(gone).close()


def registry_tags(registry: str) -> set[str]:
    import json
    import urllib.error

    try:
        with urllib.request.urlopen(f"http://{registry}/v2/trialbox-env/tags/list") as r:
            return set(json.load(r).get("tags") or [])
    except urllib.error.HTTPError:
        return set()


async def measure(args: argparse.Namespace, task: Path, base: TrialConfig) -> dict[str, Any]:
    one = ray_config(base, args.registry, {"bench": "head"})
    two = ray_config(base, args.registry, {})
    assert isinstance(two.backend, RayBackendConfig)
    await RayCluster(two.backend, two.limits).ensure_image(load_task(task), base.base_image_map)
    figures: dict[str, Any] = {}
    async with engine_of(base, task, 1) as local, engine_of(one, task, 1) as placed:
        await alternating({"warm-local": local, "warm-ray": placed}, 2)  # actors made, images
        figures.update(await alternating({"local": local, "ray": placed}, args.n))
    async with engine_of(one, task, args.c) as engine:
        figures["one"] = await throughput(engine, args.m, "one")
    async with engine_of(two, task, args.c) as engine:
        figures["two"] = await throughput(engine, args.m, "two")
    return figures


def report(figures: dict[str, Any], args: argparse.Namespace) -> None:
    (local, local_own), (placed, placed_own) = figures["local"], figures["ray"]
    print(f"\n1. dispatch, {args.n} trials each, one at a time, taking turns (ms)")
    print(f"{'':24} {'p50':>7} {'p95':>7} {'mean':>7} {'trial p50':>10} {'rest p50':>9}")
    for name, walls, own in (
        ("local engine", local, local_own),
        ("Ray, the same engine", placed, placed_own),
    ):
        rest = [w - o for w, o in zip(walls, own, strict=True)]
        print(
            f"{name:24} {percentile(walls, 0.5) * 1000:7.0f} "
            f"{percentile(walls, 0.95) * 1000:7.0f} {statistics.mean(walls) * 1000:7.0f} "
            f"{percentile(own, 0.5) * 1000:10.0f} {percentile(rest, 0.5) * 1000:9.0f}"
        )
    rest = [w - o for w, o in zip(placed, placed_own, strict=True)]
    local_rest = [w - o for w, o in zip(local, local_own, strict=True)]
    added = (percentile(rest, 0.5) - percentile(local_rest, 0.5)) * 1000
    wall = (percentile(placed, 0.5) - percentile(local, 0.5)) * 1000
    print(
        f"dispatch through Ray adds {added:.0f} ms at p50 (target <= 50 ms): 'trial' is the "
        "time a trial reports for its own phases where it ran, 'rest' the time around it "
        f"(placing, shipping, files back); the p50 wall times differ by {wall:+.0f} ms, "
        "within the trials' own spread"
    )
    (rate_one, engines_one), (rate_two, engines_two) = figures["one"], figures["two"]
    print(f"\n2. throughput, {args.m} trials at concurrency {args.c} through Ray (trials/s)")
    print(f"{'one engine':28} {rate_one:8.2f}   ({len(engines_one)} engine used)")
    print(f"{'two engines':28} {rate_two:8.2f}   ({len(engines_two)} engines used)")
    print(f"two engines / one: {rate_two / rate_one:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20, help="sequential trials per path")
    parser.add_argument("-m", type=int, default=24, help="trials per throughput run")
    parser.add_argument("-c", type=int, default=8, help="concurrency of the throughput runs")
    parser.add_argument("--registry", default="127.0.0.1:5000")
    parser.add_argument("--base-image", default=DEFAULT_MAP)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-scale-out-"))
    task = make_task(root)
    (task / "task.toml").write_text(TASK_TOML)
    base = TrialConfig(
        jobs_dir=root / "jobs", base_image_map=parse_image_map(args.base_image), no_internet=True
    )
    second = SecondDockerd()
    cluster = Cluster()
    before = registry_tags(args.registry)
    try:
        second.start()
        second.load_image(next(iter(base.base_image_map.values())))
        first_host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        scratch = {"TRIALBOX_NODE_SCRATCH": str(root / "scratch")}
        cluster.add_node(
            num_cpus=SLOTS, memory=NODE_MEMORY, labels={"bench": "head"},
            env_vars={"DOCKER_HOST": first_host, **scratch},
        )  # fmt: skip
        cluster.add_node(
            num_cpus=SLOTS, memory=NODE_MEMORY, env_vars={"DOCKER_HOST": second.host, **scratch}
        )
        ray.init(address=cluster.address, log_to_driver=False)
        report(asyncio.run(measure(args, task, base)), args)
    finally:
        ray.shutdown()
        cluster.shutdown()
        second.stop()
        delete_pushed(args.registry, before)


if __name__ == "__main__":
    main()
