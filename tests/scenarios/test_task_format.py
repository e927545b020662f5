"""task.toml settings docs/tasks.md documents, run end to end: a prebuilt image, the verifier's
environment, and the root-only /tests an agent's leftover processes cannot read."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from orchestrator import TrialConfig, load_task, run_trial
from tests.conftest import BASE_IMAGE, MakeTask

pytestmark = pytest.mark.docker


async def test_task_with_a_prebuilt_docker_image_and_no_dockerfile_runs_and_scores(
    config: TrialConfig, make_task: MakeTask
) -> None:
    task = make_task(
        "prebuilt",
        dockerfile=None,
        task_toml=f'[environment]\ndocker_image = "{BASE_IMAGE}"\n',
        test_sh=(
            "#!/bin/sh\n"
            # The answer the agent wrote, and the runtime layer every image gets.
            '[ "$(cat /tmp/answer.txt)" = 42 ] && '
            "/opt/trialbox/venv/bin/python -c 'import container_runtime' && "
            "echo 1 > /logs/verifier/reward.txt\n"
        ),
    )
    assert not (task / "environment" / "Dockerfile").exists()
    assert load_task(task).config.environment.docker_image == BASE_IMAGE

    result = await run_trial(task, "command:echo 42 > /tmp/answer.txt", config=config)

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 1.0)
    assert result.image_tag is not None and result.image_tag != BASE_IMAGE


async def test_verifier_env_from_task_toml_reaches_test_sh(
    config: TrialConfig, make_task: MakeTask
) -> None:
    value = f"v-{uuid.uuid4().hex[:8]} with spaces"
    task = make_task(
        "verifier-env",
        task_toml=f'[verifier]\nenv = {{ PROBE_KEY = "{value}" }}\n',
        test_sh=(
            "#!/bin/sh\n"
            'echo "saw: $PROBE_KEY"\n'
            f"if [ \"$PROBE_KEY\" = '{value}' ]; then r=1; else r=0; fi\n"
            "echo $r > /logs/verifier/reward.txt\n"
        ),
    )
    assert load_task(task).config.verifier.env == {"PROBE_KEY": value}

    result = await run_trial(task, "nop", config=config)

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 1.0)
    stdout = Path(result.trial_dir) / "logs" / "verifier" / "test-stdout.txt"
    assert stdout.read_text() == f"saw: {value}\n"


# Run by the oracle as the image's non-root USER: it leaves a prober behind that, once the
# verifier says it runs, tries to list /tests and read test.sh, and records what happened.
PROBER = textwrap.dedent(
    """\
    #!/bin/sh
    id -un > /tmp/probe-user
    nohup sh -c '
      while [ ! -e /tmp/verifying ]; do sleep 0.05; done
      ls /tests > /tmp/ls.out 2> /tmp/ls.err; echo $? > /tmp/ls.code
      cat /tests/test.sh > /tmp/cat.out 2> /tmp/cat.err; echo $? > /tmp/cat.code
      touch /tmp/probe-done
    ' > /dev/null 2>&1 &
    """
)
# The verifier (root) records /tests' mode and owner, lets the prober run, and keeps its
# evidence; the rewards say whether /tests was root-only and the prober was refused.
VERIFIER = textwrap.dedent(
    """\
    #!/bin/sh
    stat -c '%a %U:%G' /tests > /logs/verifier/tests-stat.txt
    touch /tmp/verifying
    i=0
    while [ ! -e /tmp/probe-done ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
    cp /tmp/probe-user /tmp/ls.* /tmp/cat.* /logs/verifier/
    root_only=0; [ "$(cat /logs/verifier/tests-stat.txt)" = "700 root:root" ] && root_only=1
    refused=0; [ -e /tmp/probe-done ] && [ "$(cat /tmp/ls.code)" != 0 ] && [ ! -s /tmp/ls.out ] \\
      && [ "$(cat /tmp/cat.code)" != 0 ] && [ ! -s /tmp/cat.out ] && refused=1
    echo "{\\"tests_root_only\\": $root_only, \\"agent_refused\\": $refused}" \\
      > /logs/verifier/reward.json
    """
)


async def test_tests_dir_is_root_only_and_unreadable_by_the_agent_while_the_verifier_runs(
    config: TrialConfig, make_task: MakeTask
) -> None:
    task = make_task(
        "tests-root-only",
        dockerfile="FROM python:3.11-slim-bookworm\nUSER nobody\nWORKDIR /tmp\n",
        solve_sh=PROBER,
        test_sh=VERIFIER,
        task_toml='[verifier]\ntimeout_sec = 60.0\nuser = "root"\n',  # as in Harbor
    )

    result = await run_trial(task, "oracle", config=config)

    assert result.error is None, result.error
    evidence = Path(result.trial_dir) / "logs" / "verifier"
    assert (evidence / "probe-user").read_text() == "nobody\n"
    assert (evidence / "tests-stat.txt").read_text() == "700 root:root\n"
    assert (evidence / "ls.out").read_text() == ""
    assert (evidence / "ls.code").read_text() == "2\n"
    assert (evidence / "ls.err").read_text() == (
        "ls: cannot open directory '/tests': Permission denied\n"
    )
    assert (evidence / "cat.out").read_text() == ""
    assert (evidence / "cat.code").read_text() == "1\n"
    assert (evidence / "cat.err").read_text() == "cat: /tests/test.sh: Permission denied\n"
    assert result.rewards == {"tests_root_only": 1.0, "agent_refused": 1.0}
