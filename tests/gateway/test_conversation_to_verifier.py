"""The verifier sees the conversation the gateway recorded when the agent saved none: a
workflow that returns nothing, or a CLI agent, is graded on what the model was told and
answered (`/logs/agent/trajectory.json`, which `GraderContext.messages` reads). An agent's own
trajectory is never replaced in the sandbox. Real containers, no network, the stand-in model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import ModelConfig, TrialConfig, run_trial
from tests.conftest import DEFAULT_DOCKERFILE, MakeTask
from tests.support.standin import Reply, StandIn

pytestmark = pytest.mark.docker

UPSTREAM_KEY = "sk-upstream-handover-3e8b1c7d"

# The agent asks the model once and saves nothing: no trajectory, no answer file.
ASK = """\
import json, os, sys, urllib.request

body = {"model": os.environ["TRIALBOX_MODEL"],
        "messages": [{"role": "user", "content": "What is the capital of France?"}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
urllib.request.urlopen(request).read()
if len(sys.argv) > 1:  # an agent that keeps its own record
    with open("/logs/agent/trajectory.json", "w") as out:
        json.dump([{"role": "assistant", "content": sys.argv[1]}], out)
"""

# A grader's view: the messages the runtime loads for `GraderContext`; reward 1 when the last
# one is the label, and the whole conversation kept for the test to read.
GRADE = """\
import json
from container_runtime import GraderContext

ctx = GraderContext.load()
messages = ctx.messages or []
with open("/logs/verifier/seen.json", "w") as out:
    json.dump(messages, out)
last = messages[-1]["content"] if messages else None
ctx.set_reward(1.0 if last == ctx.label else 0.0)
from container_runtime.contract import write_reward
write_reward(ctx.rewards)
"""
TEST_SH = "#!/bin/sh\n/opt/trialbox/venv/bin/python /tests/grade.py\n"


def asking_task(make_task: MakeTask) -> Path:
    return make_task(
        "ask",
        dockerfile=DEFAULT_DOCKERFILE + "COPY ask.py /app/ask.py\n",
        test_sh=TEST_SH,
        files={"environment/ask.py": ASK, "tests/grade.py": GRADE},
    )


async def ask(make_task: MakeTask, agent: str, config: TrialConfig) -> tuple[Path, list]:
    """Run the asking task with `agent` against a model that answers "Paris" (the label):
    the trial's logs folder, and the messages the grader saw."""
    async with StandIn(Reply(content="Paris")) as upstream:
        model = ModelConfig(name="policy", base_url=upstream.base_url, api_key=UPSTREAM_KEY)
        offline = config.model_copy(update={"model": model, "no_internet": True})
        result = await run_trial(
            asking_task(make_task), agent, config=offline, metadata={"label": "Paris"}
        )
    assert (result.status, result.error) == ("success", None)
    logs = Path(result.trial_dir) / "logs"
    assert result.reward == (1.0 if agent.endswith("ask.py") else 0.0)
    return logs, json.loads((logs / "verifier" / "seen.json").read_text())


async def test_an_agent_that_saved_nothing_is_graded_on_the_recorded_conversation(
    config: TrialConfig, make_task: MakeTask
) -> None:
    logs, seen = await ask(make_task, "command:python3 /app/ask.py", config)

    assert [m["role"] for m in seen] == ["user", "assistant"]  # and the answer scored 1
    assert seen[0]["content"] == "What is the capital of France?"
    assert UPSTREAM_KEY not in (logs / "agent" / "trajectory.json").read_text()
    assert not (logs / "agent" / "trajectory.agent.json").exists()  # it was never the agent's
    assert json.loads((logs / "agent" / "trajectory.json").read_text())["steps"]


async def test_an_agents_own_trajectory_is_what_the_verifier_sees(
    config: TrialConfig, make_task: MakeTask
) -> None:
    logs, seen = await ask(make_task, "command:python3 /app/ask.py Lyon", config)

    assert seen == [{"role": "assistant", "content": "Lyon"}]  # the agent's, scored 0
    kept = json.loads((logs / "agent" / "trajectory.agent.json").read_text())
    assert kept == [{"role": "assistant", "content": "Lyon"}]
    assert json.loads((logs / "agent" / "trajectory.json").read_text())["steps"]  # the record
