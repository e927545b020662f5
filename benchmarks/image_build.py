"""What trialbox adds to building a task's image, and whether prewarming many pays off.

For k distinct trivial tasks (each `FROM python:3.11-slim-bookworm` plus one RUN of its own,
mapped onto the local base image), in one run:

- trialbox's build of each task (`ImageBuilder.ensure_image`: the plan, the build, the
  runtime venv) paired with the floor's build of a task of the same Dockerfile: a plain
  `docker build` of that Dockerfile (its FROM mapped as trialbox maps it), the two right after
  one another (each first in half the pairs), so both meet the engine in the same state; their
  p50s, and the ratios of the p50s, the sums and each pair's;
- `prewarm` of k further distinct tasks (trialbox's own parallelism);
- `prewarm` again of that unchanged set (every image cached).

Every task has its own RUN line, so no build reuses another's layers. What is made once per
engine before any timing is made first and timed apart: the runtime venv's folder in this
host's store for the base image's CPython (a local engine), or the tools image (`--in-image`:
the venv built into each image, as for a remote engine). Every image it builds is removed at
the end.

    python benchmarks/image_build.py [-k 1 8] [--parallel N] [--in-image]

Targets: trialbox's build of a trivial task at most 1.1x the plain build's (p50); prewarming
k images at most 1.3x the plain builds of the same k; a prewarm of an unchanged set under 1 s.
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


async def trialbox_build(builder: ImageBuilder, task: Path, made: list[str]) -> float:
    started = time.perf_counter()
    outcome = await builder.ensure_image(load_task(task), MAPPING)
    seconds = time.perf_counter() - started
    made.append(outcome.tag)
    assert outcome.status == "built" and outcome.runtime == "present", outcome
    return seconds


async def timed_prewarm(tasks: list[Path], parallel: int, made: list[str], in_image: bool) -> float:
    backend = DockerBackend(builder=ImageBuilder(mount_runtime=False if in_image else None))
    started = time.perf_counter()
    rows = await prewarm(tasks, base_image_map=MAPPING, backend=backend, max_parallel=parallel)
    made.extend(r.tag for r in rows if r.tag)
    return time.perf_counter() - started


async def once_per_engine(client: docker.DockerClient, root: Path, in_image: bool) -> str:
    """What a first build makes for every later one, made and timed before any timing."""
    builder = ImageBuilder(mount_runtime=False if in_image else None)
    started = time.perf_counter()
    if in_image:
        await builder.tools_image()
        return f"the tools image: {time.perf_counter() - started:.2f} s (or found)"
    made: list[str] = []
    try:
        (task,) = make_tasks(root / "first", 1, "first")
        outcome = await builder.ensure_image(load_task(task), MAPPING)
        made.append(outcome.tag)
        mount = await builder.runtime_mount(outcome.tag)
        assert mount is not None, "the engine is not local: give --in-image"
    finally:
        remove(client, made)
    return (
        f"a first image and the store's venv ({Path(mount.source).name}): "
        f"{time.perf_counter() - started:.2f} s (the venv made once, or found)"
    )


def remove(client: docker.DockerClient, tags: list[str]) -> None:
    for tag in set(tags):
        try:
            client.images.remove(tag, force=True)
        except docker.errors.APIError:
            pass


async def one_size(
    client: docker.DockerClient, root: Path, k: int, parallel: int, in_image: bool
) -> None:
    made: list[str] = []
    plain: list[float] = []
    ours: list[float] = []
    builder = ImageBuilder(mount_runtime=False if in_image else None)
    try:
        pairs = zip(
            make_tasks(root / f"k{k}", k, "plain"),
            make_tasks(root / f"k{k}", k, "trialbox"),
            strict=True,
        )
        for i, (floor_task, our_task) in enumerate(pairs):
            if i % 2:  # each goes first in half the pairs: what one leaves, the other meets
                ours.append(await trialbox_build(builder, our_task, made))
                plain.append(plain_build(client, floor_task, made))
            else:
                plain.append(plain_build(client, floor_task, made))
                ours.append(await trialbox_build(builder, our_task, made))
        warm_set = make_tasks(root / f"k{k}", k, "prewarm")
        cold = await timed_prewarm(warm_set, parallel, made, in_image)
        again = await timed_prewarm(warm_set, parallel, made, in_image)
    finally:
        remove(client, made)
    floor, mine = statistics.median(plain), statistics.median(ours)
    # Each build against the floor's just before it: what a burst of other work on the
    # machine does to both, it does to the pair.
    pairs = statistics.median(b / a for a, b in zip(plain, ours, strict=True))
    print(f"\nk = {k}")
    print(f"  plain docker build      p50 {floor:6.2f} s   sum {sum(plain):6.2f} s")
    print(f"  trialbox build          p50 {mine:6.2f} s   sum {sum(ours):6.2f} s")
    print(
        f"  trialbox / plain        p50 {mine / floor:6.2f}x  sum {sum(ours) / sum(plain):5.2f}x"
        f"  each pair's, p50 {pairs:5.2f}x   (target <= 1.1x)"
    )
    print(
        f"  prewarm of {k} (x{parallel})     {cold:6.2f} s = {cold / sum(plain):4.2f}x the plain "
        "builds (target <= 1.3x)"
    )
    print(f"  prewarm, unchanged set  {again:6.2f} s   (target < 1 s)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--parallel", type=int, default=None, help="prewarm's max_parallel")
    parser.add_argument(
        "--in-image", action="store_true",
        help="the venv built into each image, as for a remote engine (no mount)",
    )  # fmt: skip
    args = parser.parse_args()
    client = docker.from_env(timeout=600)
    from orchestrator.service.prewarm import DEFAULT_PARALLEL_BUILDS

    parallel = args.parallel or DEFAULT_PARALLEL_BUILDS
    with tempfile.TemporaryDirectory() as tmp:
        print("once per engine:", await once_per_engine(client, Path(tmp), args.in_image))
        for k in args.k:
            await one_size(client, Path(tmp), k, parallel, args.in_image)


if __name__ == "__main__":
    asyncio.run(main())
