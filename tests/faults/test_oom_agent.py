"""An agent that runs its sandbox out of memory so that the sandbox itself dies ends the trial
as the agent's (`AgentResourceError`, counted), never as infra: the real engine, the kernel's
OOM killer, the default limits.

The kernel kills the process it scores highest: a lone memory hog, unless the agent says
otherwise. This agent raises PID 1's `oom_score_adj` (a root agent may) and spreads its hog
over four processes, so that none of them outscores PID 1 (the kernel's bonus for an adj of
1000 is 1000 * (limit pages // 1000), a little under the whole limit): PID 1 is killed, and
with it the sandbox; the engine logs `oom` and `die`, and nobody asked it to kill. (An OOM
kill the sandbox survives is a warning: test_sandbox_faults.py.)
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from orchestrator import TrialConfig, run_trial
from tests.conftest import MakeTask

pytestmark = pytest.mark.docker

MEMORY_MB = 64
TASK_TOML = (
    "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
    f"[environment]\nmemory_mb = {MEMORY_MB}\n"
)
HOG = "x = []\nwhile True: x.append(bytearray(1024 * 1024))\n"
AGENT = (
    "command:echo 42 > /app/answer.txt; echo 1000 > /proc/1/oom_score_adj; "
    f"for i in 1 2 3 4; do /opt/trialbox/venv/bin/python -c {shlex.quote(HOG)} & done; wait"
)


async def test_an_agent_whose_memory_use_kills_its_sandbox_fails_as_agent(
    config: TrialConfig, make_task: MakeTask
) -> None:
    task = make_task(task_toml=TASK_TOML)

    result = await run_trial(task, AGENT, config=config)

    assert (result.status, result.reward) == ("failure", None)
    assert result.error is not None, result
    assert (result.error.category, result.error.type) == ("agent", "AgentResourceError"), (
        result.error
    )
    # The phase is the agent's when the engine has logged the sandbox's death by the time the
    # agent's exec returns; when it has not yet, the verifier's first exec finds the sandbox
    # gone and the same cause is named there (a race: tests/trials/test_category_rules.py
    # holds the strict xfail for it).
    assert result.error.phase in ("agent", "verify"), result.error
    assert "ran out of memory" in result.error.message
    assert f"memory_mb={MEMORY_MB}" in result.error.message
    written = json.loads((Path(result.trial_dir) / "result.json").read_text())
    assert written["error"]["category"] == "agent"
    assert written["error"]["discardable"] is False
