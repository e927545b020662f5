"""An LLM agent on cluster nodes: each node's own model gateway serves the trial's sandbox
(its socket is bind-mounted there), with the upstream's key from the driver's config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator import ModelConfig, run_job
from tests.conftest import EXAMPLES
from tests.ray.conftest import WHOLE_NODE_TOML, TwoEngines
from tests.support.standin import StandIn, shell_solver

pytestmark = pytest.mark.ray

UPSTREAM_KEY = "sk-upstream-on-nodes-5e2b9d"
SOLVE = ["echo 'hello, world' > /app/greeting.txt", "cat /app/greeting.txt"]


async def test_the_shell_agent_talks_to_its_model_through_each_node_s_gateway(
    two_engines: TwoEngines, tmp_path: Path
) -> None:
    task = tmp_path / "hello-shell"
    shutil.copytree(EXAMPLES / "hello-shell", task)
    with (task / "task.toml").open("a") as toml:
        toml.write("\n" + WHOLE_NODE_TOML)  # two trials at once: one on each engine
    async with StandIn(shell_solver(SOLVE, "done")) as upstream:
        model = ModelConfig(name="policy", base_url=upstream.base_url, api_key=UPSTREAM_KEY)
        config = two_engines.config(tmp_path, model=model)
        job = await run_job([task], "shell", attempts=2, n_concurrent=2, config=config)
        requests = upstream.chat_requests()
    assert [(t.status, t.reward) for t in job.trials] == [("success", 1.0)] * 2
    assert {t.node.engine for t in job.trials if t.node} == {
        two_engines.first_host,
        two_engines.second_host,
    }
    assert len(requests) == 6
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {UPSTREAM_KEY}"}
    assert {r.headers["x-trialbox-rollout"] for r in requests} == {t.rollout_id for t in job.trials}
    for trial in job.trials:
        record = Path(trial.trial_dir) / "logs" / "agent" / "gateway.json"
        assert [e["status_code"] for e in json.loads(record.read_text())["exchanges"]] == [200] * 3
        assert UPSTREAM_KEY not in (Path(trial.trial_dir) / "result.json").read_text()
