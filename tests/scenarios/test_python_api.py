"""The Python entry points a script uses: the sync job runner and workflows named by module."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from orchestrator import JobResult, TrialConfig, TrialResult, run_job_sync, run_trial
from tests.conftest import EXAMPLES, MakeTask

pytestmark = pytest.mark.docker


def test_run_job_sync_scores_hello_oracle_from_a_plain_function(config: TrialConfig) -> None:
    job = run_job_sync([EXAMPLES / "hello-oracle"], "oracle", attempts=2, config=config)

    assert isinstance(job, JobResult)
    assert job.counts_by_status == {"success": 2}
    assert (job.n_counted, job.mean_reward, job.pass_at_k) == (2, 1.0, {1: 1.0, 2: 1.0})
    assert [t.reward for t in job.trials] == [1.0, 1.0]
    written = json.loads((Path(job.job_dir) / "job.json").read_text())
    assert written["job_id"] == job.job_id and written["mean_reward"] == 1.0


WORKFLOW_PACKAGE = {
    "__init__.py": "",
    # A sibling module: the whole package must reach the sandbox, not only the named module.
    "words.py": "def shout(text: str) -> str:\n    return text.strip().upper() + '!'\n",
    "flows.py": textwrap.dedent(
        """\
        from pathlib import Path

        from container_runtime import AgentContext, AgentWorkflow

        from .words import shout


        class ShoutWorkflow(AgentWorkflow):
            async def run(self, ctx: AgentContext) -> dict:
                answer = shout(ctx.instruction)
                Path("/app/answer.txt").write_text(answer + "\\n")
                return {"answer": answer, "trial": ctx.trial_id}
        """
    ),
}


async def test_workflow_named_by_importable_module_runs_with_its_whole_package(
    config: TrialConfig, make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = f"shout_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / "agents" / package).mkdir(parents=True)
    for name, text in WORKFLOW_PACKAGE.items():
        (tmp_path / "agents" / package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "agents"))
    task = make_task(
        "shout",
        instruction="hello workflow\n",
        test_sh=(
            "#!/bin/sh\n"
            'if [ "$(cat /app/answer.txt)" = "HELLO WORKFLOW!" ]; then r=1; else r=0; fi\n'
            "echo $r > /logs/verifier/reward.txt\n"
        ),
    )

    result: TrialResult = await run_trial(
        task, f"workflow:{package}.flows:ShoutWorkflow", config=config
    )

    assert result.error is None, result.error
    assert (result.status, result.reward, result.warnings) == ("success", 1.0, [])
    assert result.agent.termination == "exited" and result.agent.exit_code == 0
    agent_logs = Path(result.trial_dir) / "logs" / "agent"
    outcome = json.loads((agent_logs / "container_result.json").read_text())
    assert outcome["status"] == "success"
    assert outcome["output"] == {"answer": "HELLO WORKFLOW!", "trial": result.trial_id}
