"""What trialbox adds to building a task's image, and whether prewarming many pays off.

For k distinct trivial tasks (each `FROM python:3.11-slim-bookworm` plus one RUN of its own,
mapped onto the local base image), in one run:

- the floor: a plain `docker build` of each task's own Dockerfile, one after another;
- trialbox's build of each task (its runtime venv added), one after another;
- `prewarm` of k further distinct tasks (trialbox's own parallelism);
- `prewarm` again of that unchanged set (every image cached).

Every task has its own RUN line, so no build reuses another's layers. Every image it builds
is removed at the end.

    python benchmarks/image_build.py [-k 1 8] [--parallel N]

Targets: the venv layer adds at most 1.5 s per image at p50; prewarming k images takes at
most 1.3x the plain builds of the same k; a prewarm of an unchanged set takes under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import docker
from bench_common import DEFAULT_MAP

from orchestrator import load_task, prewarm
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.images import ImageBuilder
from orchestrator.trials.config import parse_image_map

MAPPING = parse_image_map(DEFAULT_MAP)
FROM = next(iter(MAPPING))


def make_tasks(root: Path, k: int, kind: str) -> list[Path]:
    tasks = []
    for i in range(k):
        task = root / f"{kind}-{i}"
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "instruction.md").write_text("Do nothing.\n")
        (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
        unique = uuid.uuid4().hex
        (task / "environment" / "Dockerfile").write_text(
            f"FROM {FROM}\nRUN echo {unique} > /marker\n"
        )
        tasks.append(task)
    return tasks


def plain_build(client: docker.DockerClient, task: Path, made: list[str]) -> float:
    """`docker build` of the task's own Dockerfile, its FROM mapped as trialbox maps it."""
    text = (task / "environment" / "Dockerfile").read_text().replace(FROM, MAPPING[FROM])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = text.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    tag = f"trialbox-bench-plain:{uuid.uuid4().hex[:12]}"
    started = time.perf_counter()
    for _ in client.api.build(
        fileobj=io.BytesIO(buffer.getvalue()), custom_context=True, tag=tag, rm=True,
        pull=False, decode=True,
    ):  # fmt: skip
        pass
    made.append(tag)
    return time.perf_counter() - started


async def trialbox_builds(tasks: list[Path], made: list[str]) -> list[float]:
    builder = ImageBuilder()
    seconds = []
    for task in tasks:
        started = time.perf_counter()
        outcome = await builder.ensure_image(load_task(task), MAPPING)
        seconds.append(time.perf_counter() - started)
        made.append(outcome.tag)
    return seconds


async def timed_prewarm(tasks: list[Path], parallel: int, made: list[str]) -> float:
    backend = DockerBackend(builder=ImageBuilder())
    started = time.perf_counter()
    rows = await prewarm(tasks, base_image_map=MAPPING, backend=backend, max_parallel=parallel)
    made.extend(r.tag for r in rows if r.tag)
    return time.perf_counter() - started


async def one_size(client: docker.DockerClient, root: Path, k: int, parallel: int) -> None:
    made: list[str] = []
    try:
        plain = [plain_build(client, t, made) for t in make_tasks(root / f"k{k}", k, "plain")]
        ours = await trialbox_builds(make_tasks(root / f"k{k}", k, "trialbox"), made)
        warm_set = make_tasks(root / f"k{k}", k, "prewarm")
        cold = await timed_prewarm(warm_set, parallel, made)
        again = await timed_prewarm(warm_set, parallel, made)
    finally:
        for tag in set(made):
            try:
                client.images.remove(tag, force=True)
            except docker.errors.APIError:
                pass
    added = [b - a for a, b in zip(plain, ours, strict=True)]
    print(f"\nk = {k}")
    print(
        f"  plain docker build      p50 {statistics.median(plain):6.2f} s   sum {sum(plain):6.2f} s"
    )
    print(
        f"  trialbox build          p50 {statistics.median(ours):6.2f} s   sum {sum(ours):6.2f} s"
    )
    print(f"  venv layer adds         p50 {statistics.median(added):6.2f} s   (target <= 1.5 s)")
    print(
        f"  prewarm of {k} (x{parallel})     {cold:6.2f} s = {cold / sum(plain):4.2f}x the plain "
        "builds (target <= 1.3x)"
    )
    print(f"  prewarm, unchanged set  {again:6.2f} s   (target < 1 s)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--parallel", type=int, default=None, help="prewarm's max_parallel")
    args = parser.parse_args()
    client = docker.from_env(timeout=600)
    await ImageBuilder().tools_image()  # built once, outside every timing
    from orchestrator.service.prewarm import DEFAULT_PARALLEL_BUILDS

    parallel = args.parallel or DEFAULT_PARALLEL_BUILDS
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.k:
            await one_size(client, Path(tmp), k, parallel)


if __name__ == "__main__":
    asyncio.run(main())
