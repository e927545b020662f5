"""The rollout server under load: status and cancel latency, and the server's peak memory.

Starts `trialbox serve` (a nop task, 4 slots) as its own process on loopback, submits 1,000
rollouts, then, while they queue and run, times GET /rollouts/{id} and single-id cancels.
Everything still in flight is cancelled by prefix at the end and the server is shut down.

The floor, measured in the same window: a bare asyncio HTTP server in a process of its own
that answers every GET with a fixed JSON body. Its latency is what this machine gives any
server while the trials' containers load the cores; status / floor is what trialbox adds.

    python benchmarks/service_load.py [-n 1000] [--base-image FROM=LOCAL]

Targets: p99 status latency under 20 ms; the server's peak RSS under 300 MB.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from bench_common import DEFAULT_MAP, make_task, percentile

FLOOR_SERVER = """
import asyncio, sys
BODY = b'{"rollout_id": "x", "status": "queued"}'
HEAD = b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: %d\\r\\n\\r\\n"
async def serve(reader, writer):
    while True:
        request = await reader.readuntil(b"\\r\\n\\r\\n")
        if not request:
            break
        writer.write(HEAD % len(BODY) + BODY)
        await writer.drain()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def line(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"{name:<26} n={len(ms):<5} p50 {statistics.median(ms):6.2f} ms   "
        f"p99 {percentile(ms, 0.99):6.2f} ms   max {max(ms):6.2f} ms"
    )


def timed(call: Callable[[], httpx.Response]) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = call()
    elapsed = time.perf_counter() - started
    if response.status_code >= 400:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
    return elapsed, response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="rollouts to submit (default 1000)")
    parser.add_argument("--base-image", default=DEFAULT_MAP, help=f"default {DEFAULT_MAP}")
    parser.add_argument("--probe-sec", type=float, default=20.0, help="status probing window")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        task = make_task(root)
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable, "-m", "orchestrator.cli", "serve", "--task", str(task),
                "--agent", "nop", "--n-concurrent", "4", "--max-queue-depth", str(args.n + 10),
                "--port", str(port), "--jobs-dir", str(root / "jobs"), "--prewarm",
                "--drain-sec", "0", "--base-image", args.base_image,
            ],
            stdout=subprocess.DEVNULL,
            stderr=(root / "server.log").open("w"),
        )  # fmt: skip
        floor_port = free_port()
        floor = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(floor_port)])
        base = f"http://127.0.0.1:{port}"
        try:
            with (
                httpx.Client(base_url=base, timeout=30) as client,
                httpx.Client(base_url=f"http://127.0.0.1:{floor_port}", timeout=30) as bare,
            ):
                for _ in range(600):
                    try:
                        if client.get("/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.1)
                else:
                    raise RuntimeError(
                        "the server did not come up: " + (root / "server.log").read_text()
                    )

                nonce = os.urandom(3).hex()
                ids = [f"bench-{nonce}::r{i}" for i in range(args.n)]
                started = time.perf_counter()

                def submit(rid: str) -> float:
                    return timed(lambda: client.post("/rollouts", json={"rollout_id": rid}))[0]

                with ThreadPoolExecutor(max_workers=16) as pool:
                    submits = list(pool.map(submit, ids))
                submit_wall = time.perf_counter() - started

                statuses: list[float] = []
                floors: list[float] = []
                seen: dict[str, int] = {}
                deadline = time.perf_counter() + args.probe_sec
                while time.perf_counter() < deadline:
                    rid = random.choice(ids)
                    elapsed, response = timed(lambda rid=rid: client.get(f"/rollouts/{rid}"))
                    statuses.append(elapsed)
                    state = response.json()["status"]
                    seen[state] = seen.get(state, 0) + 1
                    floors.append(timed(lambda: bare.get("/"))[0])

                queued = [
                    i for i in ids if client.get(f"/rollouts/{i}").json()["status"] == "queued"
                ]
                cancels = [
                    timed(lambda rid=rid: client.post("/rollouts/cancel", json={"ids": [rid]}))[0]
                    for rid in queued[:200]
                ]
                rest = client.post("/rollouts/cancel", json={"prefix": f"bench-{nonce}::"}).json()
                rss = peak_rss_mb(server.pid)
        finally:
            floor.kill()
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()

    print(f"{args.n} rollouts submitted in {submit_wall:.1f} s; states seen while probing: {seen}")
    print(line("submit (POST)", submits))
    print(line("status (GET), loaded", statuses))
    print(line("floor (bare asyncio GET)", floors))
    print(line("cancel one id (POST)", cancels))
    print(f"cancel by prefix at the end: {len(rest['dispositions'])} dispositions")
    print(f"server peak RSS: {rss:.0f} MB")
    print()
    p99, floor_p99 = percentile(statuses, 0.99), percentile(floors, 0.99)
    print(f"p99 status latency {p99 * 1000:.2f} ms (target < 20 ms)")
    print(f"p99 status / p99 floor = {p99 / floor_p99:.2f}x (what trialbox adds on this machine)")
    print(f"peak RSS {rss:.0f} MB (target < 300 MB)")


if __name__ == "__main__":
    main()
