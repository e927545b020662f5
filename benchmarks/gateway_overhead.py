"""What the model gateway adds to an agent's model calls.

Starts the stand-in upstream (`python -m tests.support.standin`) as its own process, with a
small model's latency before each answer and a pause between stream chunks, and a Gateway
with one slot pointing at it, by default in a process of its own too. Then, in one run, times
chat calls straight to the stand-in (the peer) and through the slot's unix socket, whole and
streamed, at 1 stream and at 64 concurrent streams. Direct and gateway rows alternate in
rounds so drift hits both. Prints p50/p95 per call (streams: to the last chunk, and the p50
of the first chunk), calls per second, the p50 the gateway adds, and gateway / direct
throughput at 64 streams.

    python benchmarks/gateway_overhead.py [-n 100] [--per-stream 10] [--delay-ms 20]
        [--chunk-delay-ms 5] [--words 24] [--prompt-kb 4] [--streams 64] [--gateway-in-loop]

Targets: the gateway adds at most 2 ms at p50; its throughput at 64 streams is at least 0.8x
direct.

Why the gateway runs in its own process: in trialbox it runs in the orchestrator, never in the
agent's process, and the client here stands for 64 agents. In one loop, every microsecond the
gateway spends on a call would also delay the client's other 63 streams and be counted twice
(once as gateway work, once as client queueing), while the direct path would have the loop to
itself. `--gateway-in-loop` measures that case too. Both paths use the same client (aiohttp,
the gateway's own client library, pooled connections, one session per path), so the client's
cost cancels out; the gateway path talks to the slot's socket as the sandbox's forwarder
would, without the forwarder's own hop. On a 2-core machine the three processes share the
cores, so throughput at 64 streams includes the gateway's CPU competing with the stand-in's
and the client's, as it would with sandboxes beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from bench_common import percentile

from orchestrator.gateway.server import Gateway
from orchestrator.gateway.settings import ModelConfig
from orchestrator.gateway.slot import Slot

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parents[1]
MODEL = "bench-model"
UPSTREAM_KEY = "sk-bench-upstream"
START_WITHIN_SEC = 20.0
CALL_TIMEOUT = aiohttp.ClientTimeout(total=60)


# --- the gateway's own process ------------------------------------------------------------


async def serve_gateway(base_url: str) -> None:
    """`--serve-gateway URL`: one slot on URL; prints {"socket", "token"}, serves until
    SIGTERM, then prints the slot's usage (so the parent can check every call went through)."""
    async with Gateway() as gateway:
        config = ModelConfig(name=MODEL, base_url=base_url, api_key=UPSTREAM_KEY)
        slot = await gateway.open_slot(trial_id="bench", rollout_id="bench-rollout", model=config)
        print(json.dumps({"socket": str(slot.socket_path), "token": slot.token}), flush=True)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        await done.wait()
        print(json.dumps(slot.record.usage.model_dump()), flush=True)


# --- processes ----------------------------------------------------------------------------


class Child:
    """A process of ours whose first stdout line says where it listens; stopped on exit."""

    def __init__(self, name: str, command: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        self.rest: str | None = None

    def first_line(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_WITHIN_SEC)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the {self.name} did not start (exit code {self.proc.poll()})")
        return line.strip()

    def cpu_sec(self) -> float:
        """User plus system CPU seconds the process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> str:
        """SIGTERM, wait, kill if need be; the rest of its stdout. Idempotent."""
        if self.rest is None:
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                rest, _ = self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rest, _ = self.proc.communicate()
            self.rest = rest or ""
        return self.rest


@contextlib.contextmanager
def child(name: str, command: list[str]):
    process = Child(name, command)
    try:
        yield process
    finally:
        process.stop()


# --- the client ---------------------------------------------------------------------------


@dataclass
class Route:
    """One way to the model: a session and the URL and token to use on it."""

    name: str
    session: aiohttp.ClientSession
    url: str
    token: str


@dataclass
class Samples:
    """Per-call seconds (to the last byte; streams also to the first chunk), wall time."""

    total: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0

    @property
    def calls_per_sec(self) -> float:
        return len(self.total) / self.wall if self.wall else 0.0


async def whole_call(path: Route, body: bytes, samples: Samples) -> None:
    started = time.perf_counter()
    async with path.session.post(
        path.url, data=body, headers=headers(path.token)
    ) as response:  # fmt: skip
        data = await response.read()
        if response.status != 200:
            raise RuntimeError(f"{path.name}: {response.status} {data[:200]!r}")
    samples.total.append(time.perf_counter() - started)


async def streamed_call(path: Route, body: bytes, samples: Samples) -> None:
    started = time.perf_counter()
    first: float | None = None
    done = False
    async with path.session.post(path.url, data=body, headers=headers(path.token)) as response:
        if response.status != 200:
            raise RuntimeError(f"{path.name}: {response.status} {await response.text()}")
        async for line in response.content:
            if first is None and line.startswith(b"data:"):
                first = time.perf_counter() - started
            if line.startswith(b"data: [DONE]"):
                done = True
    if not done or first is None:
        raise RuntimeError(f"{path.name}: the stream ended without [DONE]")
    samples.total.append(time.perf_counter() - started)
    samples.first.append(first)


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


Call = Callable[[Route, bytes, Samples], Awaitable[None]]


async def run_row(
    path: Route, call: Call, body: bytes, streams: int, calls: int, samples: Samples
) -> None:
    """`calls` calls over `streams` concurrent streams (each stream one call at a time)."""
    per_stream = [calls // streams + (1 if i < calls % streams else 0) for i in range(streams)]

    async def stream(count: int) -> None:
        for _ in range(count):
            await call(path, body, samples)

    started = time.perf_counter()
    await asyncio.gather(*(stream(count) for count in per_stream))
    samples.wall += time.perf_counter() - started


# --- the run ------------------------------------------------------------------------------


def request_body(prompt_kb: float, stream: bool) -> bytes:
    """A small agent's request: a system prompt of `prompt_kb` KB, a tool, a user turn."""
    system = ("You are a careful coding agent working in a sandbox. " * 200)[
        : int(prompt_kb * 1024)
    ]
    body: dict[str, Any] = {
        "model": "whatever-the-agent-says",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "List the files in /tmp and tell me what they are."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "parameters": {"type": "object", "properties": {"command": {}}},
                },
            }
        ],
        "temperature": 0.7,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def row_line(label: str, samples: Samples, streamed: bool) -> str:
    p50 = statistics.median(samples.total) * 1000
    p95 = percentile(samples.total, 0.95) * 1000
    first = f"{statistics.median(samples.first) * 1000:8.2f} ms" if streamed else " " * 11
    cpu = f"{samples.cpu / len(samples.total) * 1e6:7.0f} us" if samples.cpu else ""
    return (
        f"{label:<30} p50 {p50:8.2f} ms   p95 {p95:8.2f} ms   first {first}   "
        f"{samples.calls_per_sec:7.1f} calls/s   {cpu}"
    )


@contextlib.asynccontextmanager
async def gateway_in_loop(base_url: str) -> AsyncIterator[Slot]:
    async with Gateway() as gateway:
        config = ModelConfig(name=MODEL, base_url=base_url, api_key=UPSTREAM_KEY)
        yield await gateway.open_slot(trial_id="bench", rollout_id="bench-rollout", model=config)


async def measure(args: argparse.Namespace, base_url: str, socket_path: str, token: str,
                  gateway_proc: Child | None) -> dict[str, Samples]:  # fmt: skip
    limit = max(args.streams, 1)
    direct = Route(
        "direct",
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit), timeout=CALL_TIMEOUT),
        f"{base_url}/chat/completions",
        UPSTREAM_KEY,
    )
    through = Route(
        "gateway",
        aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=socket_path, limit=limit), timeout=CALL_TIMEOUT
        ),
        "http://gateway/v1/chat/completions",
        token,
    )
    results: dict[str, Samples] = {}
    try:
        scenarios = [
            ("whole", whole_call, False, 1, args.n),
            ("streamed", streamed_call, True, 1, args.n),
            ("whole", whole_call, False, args.streams, args.per_stream * args.streams),
            ("streamed", streamed_call, True, args.streams, args.per_stream * args.streams),
        ]
        for kind, call, streamed, streams, calls in scenarios:
            body = request_body(args.prompt_kb, streamed)
            for path in (direct, through):  # warm the pools and both servers
                await run_row(path, call, body, streams, streams, Samples())
            rows = {path.name: Samples() for path in (direct, through)}
            for round_ in range(args.rounds):
                order = (direct, through) if round_ % 2 == 0 else (through, direct)
                for path in order:
                    share = calls // args.rounds
                    cpu_before = gateway_proc.cpu_sec() if gateway_proc else 0.0
                    await run_row(path, call, body, streams, share, rows[path.name])
                    if gateway_proc and path is through:
                        rows[path.name].cpu += gateway_proc.cpu_sec() - cpu_before
            for name, samples in rows.items():
                label = f"{kind}, {streams} stream{'s' if streams > 1 else ''}, {name}"
                results[f"{kind} {streams} {name}"] = samples
                print(row_line(label, samples, streamed), flush=True)
    finally:
        await direct.session.close()
        await through.session.close()
    return results


async def main_async(args: argparse.Namespace) -> None:
    content = " ".join(f"w{i}" for i in range(args.words))
    standin_cmd = [
        sys.executable, "-m", "tests.support.standin", "--model", MODEL,
        "--delay-ms", str(args.delay_ms), "--chunk-delay-ms", str(args.chunk_delay_ms),
        "--content", content,
    ]  # fmt: skip
    with child("stand-in", standin_cmd) as upstream:
        base_url = upstream.first_line()
        where = "in the benchmark's loop" if args.gateway_in_loop else "in its own process"
        print(
            f"stand-in at {base_url}: {args.delay_ms:g} ms before each answer, streams of "
            f"{args.words + 3} events {args.chunk_delay_ms:g} ms apart; {args.prompt_kb:g} KB "
            f"prompts; gateway {where}; {args.rounds} alternating rounds per row"
        )
        print(
            "(p50/p95: to the last byte; first: a stream's first chunk; the last column is the "
            "gateway process's CPU per call)\n"
        )
        if args.gateway_in_loop:
            async with gateway_in_loop(base_url) as slot:
                results = await measure(args, base_url, str(slot.socket_path), slot.token, None)
                forwarded = slot.record.usage.calls
        else:
            gateway_cmd = [sys.executable, str(SCRIPT), "--serve-gateway",
                           base_url]  # fmt: skip
            with child("gateway", gateway_cmd) as gateway_proc:
                where_to = json.loads(gateway_proc.first_line())
                results = await measure(
                    args, base_url, where_to["socket"], where_to["token"], gateway_proc
                )
                rest = gateway_proc.stop().strip().splitlines()
            forwarded = json.loads(rest[-1])["calls"] if rest else None

    print()
    for kind in ("whole", "streamed"):
        direct, through = results[f"{kind} 1 direct"], results[f"{kind} 1 gateway"]
        added = (statistics.median(through.total) - statistics.median(direct.total)) * 1000
        line = f"added p50 latency, {kind}, 1 stream: {added:+.2f} ms"
        if kind == "streamed":
            first = (statistics.median(through.first) - statistics.median(direct.first)) * 1000
            line += f" (first chunk {first:+.2f} ms)"
        print(f"{line}   (target <= 2 ms)")
    for kind in ("whole", "streamed"):
        direct = results[f"{kind} {args.streams} direct"]
        through = results[f"{kind} {args.streams} gateway"]
        added = (statistics.median(through.total) - statistics.median(direct.total)) * 1000
        ratio = through.calls_per_sec / direct.calls_per_sec
        print(
            f"throughput at {args.streams} streams, {kind}: gateway / direct = {ratio:.2f}x"
            f"   (target >= 0.8x); added p50 there {added:+.2f} ms"
        )
    if forwarded is not None:
        sent = sum(len(s.total) for k, s in results.items() if k.endswith("gateway"))
        print(f"the slot's record counts {forwarded} calls forwarded ({sent} timed + warm-ups)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="calls per row at 1 stream (100)")
    parser.add_argument("--per-stream", type=int, default=10, help="calls per stream at 64 (10)")
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (64)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="before each answer (20)")
    parser.add_argument("--chunk-delay-ms", type=float, default=5.0, help="between chunks (5)")
    parser.add_argument("--words", type=int, default=24, help="words in each reply (24)")
    parser.add_argument("--prompt-kb", type=float, default=4.0, help="system prompt size (4)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per row (2)")
    parser.add_argument(
        "--gateway-in-loop", action="store_true", help="run the gateway in this process's loop"
    )
    parser.add_argument("--serve-gateway", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        asyncio.run(serve_gateway(args.serve_gateway))
        return
    if min(args.n, args.per_stream, args.streams, args.rounds) < 1:
        parser.error("counts must be at least 1")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
