"""What a model turn costs each kind of agent: `shell` in the sandbox, `mini-swe-agent` and
`terminus` on the host.

One task (a copy of examples/hello-shell: write `hello, world` to /app/greeting.txt, on the
Python image mapped onto the local one, so the shell agent's runtime runs), N trials of each
agent through `run_trial`, the agents taking turns round by round so drift hits all three
alike, after one unmeasured trial each (the image, mini-swe-agent's import, first calls).
Each agent is scripted by its own stand-in model (`python -m tests.support.standin --script`,
a process of its own, 0 ms before each answer) to take the same 4 model calls:

- `shell`: two look-around commands, the solution (each a `bash` tool call), then a text
  answer, which ends its work;
- `mini-swe-agent`: the same three commands as `mswea_bash_command` blocks, then its
  completion signal (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, itself one more command);
- `terminus`: the same three commands as keystrokes, `duration` 0.1 s each (the protocol's
  value for a quick command), the third answer also `task_complete`, the fourth confirming it.

Prints per agent the trial's wall time p50, the agent phase's p50, the model calls per trial,
the time per turn (agent phase / calls, p50 over trials) and its ratio to the shell agent's.
Terminus sleeps by design (0.5 s for the shell's first prompt, then each command's duration):
those scripted waits are printed, and the time per turn without them beside it. Every trial
must succeed with reward 1 and exactly 4 calls, or the run stops.

Everything it starts is removed at the end, on an error or on Ctrl-C: the stand-in processes,
and any container left with this run's owner label. The task's image is kept (it is the one
`trialbox run` would build and reuse).

    python benchmarks/agent_turns.py [-n 3] [--base-image FROM=LOCAL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from bench_common import DEFAULT_MAP

from orchestrator import ModelConfig, TrialConfig, load_task, run_trial
from orchestrator.backends.docker.images import default_builder
from orchestrator.sandbox.spec import LABEL_OWNER
from orchestrator.trials.config import parse_image_map
from orchestrator.trials.terminus import START_SETTLE_SEC

REPO_ROOT = Path(__file__).resolve().parents[1]
TASK = REPO_ROOT / "examples" / "hello-shell"
MODEL = "bench-policy"
CALLS = 4
MAX_TRIALS = 20
START_WITHIN_SEC = 20.0
TERMINUS_DURATION_SEC = 0.1
AGENTS = ("shell", "mini-swe-agent", "terminus")

LOOK = ["ls -la /app", "id; uname -sr"]
SOLVE = "echo 'hello, world' > /app/greeting.txt"
MINI_DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


# --- the scripts: 4 model calls each --------------------------------------------------------


def shell_script() -> list[Any]:
    calls: list[Any] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": c}}]} for c in LOOK
    ]
    calls.append({"tool_calls": [{"name": "bash", "arguments": {"command": SOLVE}}]})
    calls.append("Wrote /app/greeting.txt.")
    return calls


def mini_script() -> list[Any]:
    def action(command: str) -> str:
        return f"THOUGHT: the next step.\n\n```mswea_bash_command\n{command}\n```"

    return [action(c) for c in [*LOOK, SOLVE, MINI_DONE]]


def terminus_script() -> list[Any]:
    def answer(commands: list[str], complete: bool) -> str:
        return json.dumps({
            "analysis": "the screen as it is",
            "plan": "the next step",
            "commands": [{"keystrokes": f"{c}\n", "duration": TERMINUS_DURATION_SEC}
                         for c in commands],
            "task_complete": complete,
        })  # fmt: skip

    return [answer([LOOK[0]], False), answer([LOOK[1]], False), answer([SOLVE], True),
            answer([], True)]  # fmt: skip


SCRIPTS = {"shell": shell_script, "mini-swe-agent": mini_script, "terminus": terminus_script}
# Seconds each agent sleeps by design in one trial (the script's waits, not trialbox's work).
WAITS = {
    "shell": 0.0,
    "mini-swe-agent": 0.0,
    "terminus": START_SETTLE_SEC + 3 * TERMINUS_DURATION_SEC,
}


# --- the stand-in processes -------------------------------------------------------------------


class StandInProcess:
    """`python -m tests.support.standin --script FILE` in a session of its own; stopped by
    `stop()` (SIGTERM, then SIGKILL), which is idempotent."""

    def __init__(self, script: Path) -> None:
        command = [
            sys.executable, "-m", "tests.support.standin", "--model", MODEL, "--script",
            str(script), "--delay-ms", "0", "--chunk-delay-ms", "0",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_WITHIN_SEC)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(f"the stand-in for {script.name} did not start")
        self.base_url = line.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def remove_owned(client: docker.DockerClient, owner: str) -> int:
    """Remove every container this run's owner label marks; how many there were."""
    found = client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={owner}"})
    for container in found:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
    return len(found)


# --- the trials -------------------------------------------------------------------------------


@dataclass
class Samples:
    total: list[float] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    agent: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)

    def per_turn(self, waits: float = 0.0) -> float:
        return statistics.median(
            (a - waits) / c for a, c in zip(self.agent, self.calls, strict=True)
        )


async def one_trial(task: Path, agent: str, config: TrialConfig, samples: Samples | None) -> None:
    result = await run_trial(task, agent, config=config)
    calls = result.usage.calls if result.usage is not None else 0
    if (result.status, result.reward, calls) != ("success", 1.0, CALLS):
        raise RuntimeError(
            f"{agent}: trial {result.trial_id} did not go as scripted: status {result.status}, "
            f"reward {result.reward}, {calls} model calls (want {CALLS}), error {result.error}; "
            f"see {result.trial_dir}"
        )
    if samples is not None:
        samples.total.append(result.timings.total)
        samples.start.append(result.timings.start)
        samples.agent.append(result.timings.agent)
        samples.calls.append(calls)


async def measure(root: Path, n: int, base_image: str, owner: str) -> dict[str, Samples]:
    task = root / "hello-shell"
    shutil.copytree(TASK, task)
    config = TrialConfig(
        jobs_dir=root / "jobs", base_image_map=parse_image_map(base_image), owner=owner
    )
    image = (await default_builder().ensure_image(load_task(task), config.base_image_map)).tag
    upstreams: dict[str, StandInProcess] = {}
    try:
        configs = {}
        for agent in AGENTS:
            script = root / f"{agent}.json"
            script.write_text(json.dumps(SCRIPTS[agent]()))
            upstreams[agent] = upstream = StandInProcess(script)
            model = ModelConfig(name=MODEL, base_url=upstream.base_url, api_key="sk-bench")
            configs[agent] = config.model_copy(update={"model": model})
        print(f"task {TASK.name} (a copy), image {image}; {n} trials per agent, interleaved\n")
        for agent in AGENTS:  # warm-up, not measured
            await one_trial(task, agent, configs[agent], None)
        samples = {agent: Samples() for agent in AGENTS}
        for _round in range(n):
            for agent in AGENTS:
                await one_trial(task, agent, configs[agent], samples[agent])
        return samples
    finally:
        for upstream in upstreams.values():
            upstream.stop()


def report(samples: dict[str, Samples]) -> None:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:8.0f} ms"

    base = samples["shell"].per_turn()
    base_net = samples["shell"].per_turn(WAITS["shell"])
    print(
        f"{'agent':<16}{'trial p50':>11}{'start p50':>11}{'agent p50':>11}{'calls':>7}"
        f"{'per turn':>11}{'/ shell':>9}{'waits':>11}{'net/turn':>11}{'/ shell':>9}"
    )
    for agent, got in samples.items():
        per_turn, net = got.per_turn(), got.per_turn(WAITS[agent])
        print(
            f"{agent:<16}{ms(statistics.median(got.total))}{ms(statistics.median(got.start))}"
            f"{ms(statistics.median(got.agent))}{statistics.median(got.calls):7.0f}"
            f"{ms(per_turn)}{per_turn / base:8.2f}x{ms(WAITS[agent])}{ms(net)}"
            f"{net / base_net:8.2f}x"
        )
    print(
        "\nper turn: the agent phase / model calls, p50 over trials; start: the sandbox's start"
        " phase (for shell, its runtime and\nforwarder too); waits: the sleeps the protocol "
        "and the script ask for in one trial (terminus: the first prompt's\nsettle, each "
        "command's duration); net: per turn without them."
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n", type=int, default=3, help=f"trials per agent (default 3, at most {MAX_TRIALS})"
    )
    parser.add_argument("--base-image", default=DEFAULT_MAP, help=f"default {DEFAULT_MAP}")
    args = parser.parse_args()
    n = max(1, min(args.n, MAX_TRIALS))
    owner = f"trialbox-bench-{os.urandom(4).hex()}"
    client = docker.from_env()
    try:
        with tempfile.TemporaryDirectory(prefix="trialbox-bench-") as tmp:
            samples = await measure(Path(tmp), n, args.base_image, owner)
    finally:
        left = remove_owned(client, owner)
        if left:
            print(f"removed {left} container(s) left behind")
        client.close()
    report(samples)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted: everything it started was removed", file=sys.stderr)
