"""A host-side agent on cluster nodes: `--agent mini-swe-agent` placed on a two-node cluster,
its loop in the node's process beside the sandbox, its model the node's gateway slot on the
node's loopback port, its actions in a sandbox with no Python at all. Two attempts, each
holding a whole node, run one on each engine; both solve the task, every call reaches the
stand-in with the upstream's key added on the node, and nothing is left."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from orchestrator import ModelConfig, run_job
from tests.conftest import OFFICIAL_IMAGE, write_task
from tests.ray.conftest import WHOLE_NODE_TOML, TwoEngines
from tests.support.standin import Reply, StandIn, by_turn

pytestmark = [pytest.mark.ray, pytest.mark.docker]

UPSTREAM_KEY = "sk-upstream-host-agent-on-nodes-8d4a"
DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# No python3 in the image; a label of its own so the build is this session's.
DOCKERFILE = (
    f"FROM {OFFICIAL_IMAGE}\nRUN rm -rf /usr/bin/python3* /usr/lib/python3* /usr/local/bin/python3*"
    f" /usr/local/lib/python3*\nWORKDIR /app\nLABEL trialbox.test={uuid.uuid4().hex}\n"
)
GREETING_TEST = (
    "#!/bin/sh\nif grep -qx 'hello from a node' /app/greeting.txt; then echo 1; else echo 0; fi"
    " > /logs/verifier/reward.txt\n"
)


def action(command: str) -> Reply:
    return Reply(content=f"THOUGHT: the next step.\n\n```mswea_bash_command\n{command}\n```")


async def test_mini_swe_agent_runs_on_the_node_that_holds_its_sandbox(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks", "mini-on-nodes", dockerfile=DOCKERFILE, test_sh=GREETING_TEST,
        instruction="Write 'hello from a node' to /app/greeting.txt.\n",
        task_toml=WHOLE_NODE_TOML,
    )  # fmt: skip
    script = [
        action("printf 'hello from a node\\n' > greeting.txt"),
        action("command -v python3 || echo no-python; cat /app/greeting.txt"),
        action(DONE),
    ]
    scratch = two_engines.scratch / "trialbox-node"
    before = set(scratch.glob("trial-*"))  # other tests' (a killed node's) stay theirs
    async with StandIn(by_turn(script, action(DONE))) as upstream:
        model = ModelConfig(name="policy", base_url=upstream.base_url, api_key=UPSTREAM_KEY)
        config = two_engines.config(tmp_path, model=model)
        job = await run_job([task], "mini-swe-agent", attempts=2, n_concurrent=2, config=config)
        requests = upstream.chat_requests()

    for trial in job.trials:
        assert trial.error is None, trial.error
        assert (trial.status, trial.reward) == ("success", 1.0)
        assert (trial.agent.termination, trial.agent.exit_code) == ("exited", 0)
        assert trial.usage is not None and trial.usage.calls == 3
    assert len(job.trials) == 2
    assert {t.node.engine for t in job.trials if t.node} == {
        two_engines.first_host,
        two_engines.second_host,
    }
    assert len(requests) == 6
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {UPSTREAM_KEY}"}
    assert {r.headers["x-trialbox-rollout"] for r in requests} == {t.rollout_id for t in job.trials}
    told = [json.dumps(r.body["messages"][-1]) for r in requests if "no-python" in
            json.dumps(r.body["messages"][-1])]  # fmt: skip
    assert len(told) == 2 and all("hello from a node" in t for t in told), told
    for trial in job.trials:
        agent_dir = Path(trial.trial_dir) / "logs" / "agent"
        exchanges = json.loads((agent_dir / "gateway.json").read_text())["exchanges"]
        assert [e["status_code"] for e in exchanges] == [200] * 3
        assert json.loads((agent_dir / "trajectory.json").read_text())["agent"]["name"] == (
            "mini-swe-agent"
        )
        own = json.loads((agent_dir / "mini-swe-agent.traj.json").read_text())
        assert own["info"]["exit_status"] == "Submitted"
        files = "".join(p.read_text(errors="replace") for p in Path(trial.trial_dir).rglob("*")
                        if p.is_file())  # fmt: skip
        assert UPSTREAM_KEY not in files
    # Nothing left on the nodes' scratch (containers: the suite's and the cluster's checks).
    assert set(scratch.glob("trial-*")) <= before
