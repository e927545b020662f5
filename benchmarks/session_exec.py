"""A session's commands and its open time, each against the docker SDK's own floor.

One run measures, side by side, on the example task's image (examples/hello-oracle, built once
with the base image mapped onto the local one; its copy here gets an hour of agent budget so a
long run never spends it):

- the floor: the SDK's `exec_run` of `true` and of `cat` of a 1 MiB file (one engine exec
  each), in a container of that image;
- a raw command channel (`DockerSandbox.open_channel`) and trialbox's plain `Sandbox.exec`;
- a session's `exec` through Python (`TrialEngine.open_session(..., fast_path=True)` and
  `fast_path=False`) and through HTTP (a real `trialbox serve` subprocess on 127.0.0.1 driven by
  `orchestrator.client.TrialboxClient`, `fast_path` true and false);
- the session open time (`open_session` until ready), through Python and through HTTP, against
  a plain SDK `containers.create` + `start` of the same image with the task's limits and its
  network (the floor: the container the session gets, less trialbox's work), the opens
  alternating.

The command rows run in interleaved rounds, so drift hits every row alike. Each row prints its
p50/p90 and its p50 as a ratio of its floor's. Everything it starts (sandboxes, sessions, the
server, the floor's containers) is removed at the end, on an error or on Ctrl-C; containers
carry a per-run owner label, and any one left is removed by it.

    python benchmarks/session_exec.py [-n 30] [--opens 5] [--only-open] [--base-image FROM=LOCAL]

Targets (issue 21): a session command's p50 through Python on the fast path at most 1/5 of the
SDK exec floor, through HTTP at most 1/3; plain-exec commands (fast_path false) within 1.3x of
the floor; the session open within 1.2x of a plain create+start.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import docker
import httpx
from bench_common import DEFAULT_MAP, percentile

from orchestrator import TrialConfig, TrialEngine, load_task
from orchestrator.backends.docker.images import default_builder
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.client import TrialboxClient
from orchestrator.common.ids import new_id
from orchestrator.sandbox import SandboxSpec
from orchestrator.sandbox.spec import LABEL_OWNER
from orchestrator.trials.config import parse_image_map

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hello-oracle"
TASK_ID = "hello-oracle"
BIG = "/tmp/bench-1mib"
MIB = 1 << 20
BUDGET_SEC = 3600  # the copy's agent.timeout_sec: a session's whole budget
Call = Callable[[], Awaitable[object]]


async def timed(call: Call) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def copy_task(root: Path) -> Path:
    """The example task under a tasks folder of its own, with an hour of agent budget."""
    tasks = root / "tasks"
    shutil.copytree(EXAMPLE, tasks / TASK_ID)
    toml = tasks / TASK_ID / "task.toml"
    text = toml.read_text()
    toml.write_text(
        text.replace("[agent]\ntimeout_sec = 60.0", f"[agent]\ntimeout_sec = {BUDGET_SEC}.0")
    )
    assert f"timeout_sec = {BUDGET_SEC}.0" in toml.read_text(), "the example's task.toml changed"
    return tasks


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def remove_owned(client: docker.DockerClient, owner: str) -> int:
    """Remove every container this run's owner label marks; how many there were."""
    found = client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={owner}"})
    for container in found:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
    return len(found)


class Server:
    """`trialbox serve` as its own process (its own process group, so a Ctrl-C reaches it only
    through `stop`)."""

    def __init__(self, tasks: Path, root: Path, base_image: str, owner: str) -> None:
        self.port = free_port()
        self.log = root / "server.log"
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "orchestrator.cli", "serve", "--tasks-dir", str(tasks),
                "-n", "8", "--port", str(self.port), "--jobs-dir", str(root / "server-jobs"),
                "--drain-sec", "0", "--base-image", base_image,
            ],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"), start_new_session=True,
            env={**os.environ, "TRIALBOX_OWNER": owner},
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as http:
            for _ in range(600):
                if self.process.poll() is not None:
                    break
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError("the server did not come up:\n" + self.log.read_text()[-4000:])

    def stop(self) -> None:
        """SIGINT (the server ends its sessions, their sandboxes with them), then SIGKILL."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def floor_open(
    client: docker.DockerClient, image: str, owner: str, cpus: float, mem: int, network: str
) -> float:
    """A plain create+start of the image with the task's limits and network mode (timed), then
    its removal. The network counts: a bridge's start costs 30-50 ms more than none's here."""
    started = time.perf_counter()
    container = client.containers.create(
        image, command=["sleep", "infinity"], detach=True, labels={LABEL_OWNER: owner},
        network_mode=network, nano_cpus=int(cpus * 1e9), mem_limit=f"{mem}m", pids_limit=1024,
        security_opt=["no-new-privileges"],
    )  # fmt: skip
    try:
        container.start()
        return time.perf_counter() - started
    finally:
        container.remove(force=True, v=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n", type=int, default=30, help="runs per command row (default 30, at most 1000)"
    )
    parser.add_argument(
        "--opens", type=int, default=5, help="opens per open row (default 5, at most 50)"
    )
    parser.add_argument("--base-image", default=DEFAULT_MAP, help=f"default {DEFAULT_MAP}")
    parser.add_argument(
        "--only-open", action="store_true", help="only the open rows (no command rows)"
    )
    args = parser.parse_args()
    runs, opens = max(1, min(args.n, 1000)), max(1, min(args.opens, 50))
    owner = f"trialbox-bench-{os.urandom(4).hex()}"
    client = docker.from_env()
    # Printable, so the HTTP rows carry the same megabyte as JSON text that the others carry.
    payload = base64.b64encode(os.urandom(MIB))[:MIB]
    try:
        with tempfile.TemporaryDirectory(prefix="trialbox-bench-") as tmp:
            root = Path(tmp)
            tasks = copy_task(root)
            config = TrialConfig(
                jobs_dir=root / "jobs", base_image_map=parse_image_map(args.base_image),
                owner=owner,
            )  # fmt: skip
            task = load_task(tasks / TASK_ID)
            image = (await default_builder().ensure_image(task, config.base_image_map)).tag
            env = task.config.environment
            network = "none" if config.no_internet else env.effective_network_mode  # the trial's
            times, open_times = await measure(
                config, tasks, root, image, owner, args.base_image, runs, opens, payload, client,
                (env.cpus or 1, env.memory_mb or 2048, network), args.only_open,
            )  # fmt: skip
    finally:
        left = remove_owned(client, owner)
        if left:
            print(f"removed {left} container(s) left behind")
    report(times, open_times, runs, opens, image, network)


async def measure(
    config: TrialConfig, tasks: Path, root: Path, image: str, owner: str, base_image: str,
    runs: int, opens: int, payload: bytes, client: docker.DockerClient,
    shape: tuple[float, int, str], only_open: bool,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:  # fmt: skip
    spec = SandboxSpec(
        image=image, trial_id=new_id("bench-session"), job_id=new_id("job-bench"), owner=owner
    )
    server = Server(tasks, root, base_image, owner)
    try:
        async with (
            TrialEngine(config=config, tasks_dir=tasks, n_concurrent=8) as engine,
            TrialboxClient(server.url) as http,
        ):
            times: dict[str, list[float]] = {}
            if only_open:
                await server.ready()
            else:
                times = await command_rows(engine, http, server, spec, runs, payload, client)

            open_times: dict[str, list[float]] = {"sdk create+start": [], "python open": [],
                                                  "http open": []}  # fmt: skip
            floor = lambda: floor_open(client, image, owner, *shape)  # noqa: E731
            await asyncio.to_thread(floor)  # warm every path once
            async with await engine.open_session(task_id=TASK_ID):
                pass
            async with await http.open_session(task_id=TASK_ID):
                pass
            for _ in range(opens):
                open_times["sdk create+start"].append(await asyncio.to_thread(floor))
                started = time.perf_counter()
                session = await engine.open_session(task_id=TASK_ID)
                open_times["python open"].append(time.perf_counter() - started)
                await session.close()
                started = time.perf_counter()
                remote = await http.open_session(task_id=TASK_ID)
                open_times["http open"].append(time.perf_counter() - started)
                await remote.close()
    finally:
        server.stop()
    return times, open_times


async def command_rows(
    engine: TrialEngine, http: TrialboxClient, server: Server, spec: SandboxSpec, runs: int,
    payload: bytes, client: docker.DockerClient,
) -> dict[str, list[float]]:  # fmt: skip
    """The command rows, interleaved: `runs` rounds of every row."""
    sandbox = await DockerSandbox.create(spec)
    try:
        await sandbox.upload_file(BIG, payload, mode=0o644)
        container = client.containers.get(sandbox.container_id)
        channel = await sandbox.open_channel()
        if channel is None:
            raise SystemExit("the channel could not start in this image")
        await server.ready()
        fast = await engine.open_session(task_id=TASK_ID, session_id=new_id("py-fast"))
        plain = await engine.open_session(
            task_id=TASK_ID, session_id=new_id("py-plain"), fast_path=False
        )
        rfast = await http.open_session(task_id=TASK_ID, session_id=new_id("http-fast"))
        rplain = await http.open_session(
            task_id=TASK_ID, session_id=new_id("http-plain"), fast_path=False
        )
        async with fast, plain, rfast, rplain:
            for session in (fast, plain, rfast, rplain):
                await session.write_file(BIG, payload)
            checks = [
                await fast.exec(argv=["cat", BIG]),
                await rfast.exec(argv=["cat", BIG]),
                await plain.exec(argv=["cat", BIG]),
                await rplain.exec(argv=["cat", BIG]),
            ]
            for check in checks:
                assert check.stdout.encode() == payload and not check.truncated, check.stderr

            def sdk(argv: list[str]) -> Call:
                return lambda: asyncio.to_thread(container.exec_run, argv)

            cat = ["cat", BIG]
            rows: dict[str, Call] = {
                "sdk exec_run: true": sdk(["true"]),
                "channel run: true": lambda: channel.run("true"),
                "sandbox exec: true": lambda: sandbox.exec("true", timeout_sec=30),
                "python fast: true": lambda: fast.exec("true"),
                "python plain: true": lambda: plain.exec("true"),
                "http fast: true": lambda: rfast.exec("true"),
                "http plain: true": lambda: rplain.exec("true"),
                "sdk exec_run: cat 1 MiB": sdk(cat),
                "channel run: cat 1 MiB": lambda: channel.run(cat, output_cap=MIB),
                "python fast: cat 1 MiB": lambda: fast.exec(argv=cat),
                "python plain: cat 1 MiB": lambda: plain.exec(argv=cat),
                "http fast: cat 1 MiB": lambda: rfast.exec(argv=cat),
                "http plain: cat 1 MiB": lambda: rplain.exec(argv=cat),
            }
            times: dict[str, list[float]] = {name: [] for name in rows}
            for call in rows.values():  # warm every path once
                await call()
            for _ in range(runs):
                for name, call in rows.items():
                    times[name].append(await timed(call))
        await channel.close()
    finally:
        await sandbox.destroy()
    return times


def report(
    times: dict[str, list[float]], open_times: dict[str, list[float]], runs: int, opens: int,
    image: str, network: str,
) -> None:  # fmt: skip
    if times:
        print(f"{runs} runs per command row, rows interleaved; image {image}")
        print(f"{'':26} {'p50':>9} {'p90':>9} {'p50 / floor':>12}")
    for name, values in times.items():
        floor = times["sdk exec_run: " + name.split(": ", 1)[1]]
        p50 = percentile(values, 0.5)
        ratio = p50 / percentile(floor, 0.5)
        print(f"{name:26} {p50 * 1e3:7.1f}ms {percentile(values, 0.9) * 1e3:7.1f}ms {ratio:11.2f}x")
    print(
        f"\n{opens} opens per row, alternating; the floor's network: {network}"
        + ("" if times else f"; image {image}")
    )
    print(f"{'':26} {'p50':>9} {'max':>9} {'p50 / floor':>12}")
    for name, values in open_times.items():
        p50 = percentile(values, 0.5)
        ratio = p50 / percentile(open_times["sdk create+start"], 0.5)
        print(f"{name:26} {p50 * 1e3:7.1f}ms {max(values) * 1e3:7.1f}ms {ratio:11.2f}x")

    def ratio(row: str, floor: str, source: dict[str, list[float]] = times) -> float:
        return percentile(source[row], 0.5) / percentile(source[floor], 0.5)

    print("\ntargets (p50 against the floor's p50):")
    checks = [
        ("python fast: true", "sdk exec_run: true", 0.2),
        ("http fast: true", "sdk exec_run: true", 1 / 3),
        ("python plain: true", "sdk exec_run: true", 1.3),
        ("python plain: cat 1 MiB", "sdk exec_run: cat 1 MiB", 1.3),
        ("http plain: true", "sdk exec_run: true", 1.3),
        ("http plain: cat 1 MiB", "sdk exec_run: cat 1 MiB", 1.3),
    ]
    for row, floor, target in checks if times else []:
        got = ratio(row, floor)
        said = "met" if got <= target else "MISSED"
        print(f"  {row:26} {got:5.2f}x  (target <= {target:.2f}x) {said}")
    got = ratio("python open", "sdk create+start", open_times)
    print(
        f"  {'python open':26} {got:5.2f}x  (target <= 1.20x) {'met' if got <= 1.2 else 'MISSED'}"
    )


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted: everything it started was removed", file=sys.stderr)
