"""The execution context Harbor gives a task, in a real container: users, working folder,
environment variables, the image's ENTRYPOINT, healthchecks, networks and host limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator import TrialConfig, run_trial
from tests.conftest import BASE_IMAGE

CONTEXT_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN useradd -m solver && useradd -m checker && mkdir -p /work/app && printf '%s\\n' \\
    '#!/bin/sh' 'echo entered > /tmp/entrypoint-ran' 'exec "$@"' > /entry.sh \\
    && chmod 0755 /entry.sh
WORKDIR /srv
ENTRYPOINT ["/entry.sh"]
"""

CONTEXT_TOML = """\
[agent]
user = "solver"

[verifier]
user = "checker"

[verifier.env]
FROM_HOST = "${TRIALBOX_TEST_HOST_VALUE}"
WITH_DEFAULT = "${TRIALBOX_TEST_UNSET:-fallback}"

[solution]
env = { SOLUTION_ONLY = "for-the-oracle" }

[environment]
workdir = "/work/app"
env = { TASK_WIDE = "everyone" }
"""

# The oracle records who and where it ran, and what it saw.
SOLVE = """\
#!/bin/sh
{ id -un; pwd; echo "$TASK_WIDE"; echo "$SOLUTION_ONLY"; echo "${FROM_HOST:-unset}"; } \\
    > /logs/agent/seen.txt
"""

# The verifier checks the same, and that the image's ENTRYPOINT ran.
CHECK = """\
#!/bin/sh
{ id -un; pwd; echo "$TASK_WIDE"; echo "${SOLUTION_ONLY:-unset}"; echo "$FROM_HOST";
  echo "$WITH_DEFAULT"; cat /tmp/entrypoint-ran; } > /logs/verifier/seen.txt
echo 1 > /logs/verifier/reward.txt
"""


async def test_users_workdir_env_and_entrypoint_are_harbor_s(
    config: TrialConfig, make_task, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIALBOX_TEST_HOST_VALUE", "host-said-so")
    monkeypatch.delenv("TRIALBOX_TEST_UNSET", raising=False)
    task = make_task(
        "context", dockerfile=CONTEXT_DOCKERFILE, task_toml=CONTEXT_TOML, solve_sh=SOLVE,
        test_sh=CHECK,
    )  # fmt: skip

    result = await run_trial(task, "oracle", config=config)

    assert result.error is None, result.error
    logs = Path(result.trial_dir) / "logs"
    agent_saw = (logs / "agent/seen.txt").read_text().split("\n")
    assert agent_saw[:5] == ["solver", "/work/app", "everyone", "for-the-oracle", "unset"]
    verifier_saw = (logs / "verifier/seen.txt").read_text().split("\n")
    # A value from the host's environment may be a secret: it reaches the verifier, and is
    # scrubbed from everything collected.
    assert verifier_saw[:7] == [
        "checker", "/work/app", "everyone", "unset", "[redacted]", "fallback", "entered",
    ]  # fmt: skip
    assert result.reward == 1.0


async def test_a_host_variable_that_is_not_set_is_refused_before_any_container(
    config: TrialConfig, make_task, monkeypatch: pytest.MonkeyPatch, container_watch
) -> None:
    monkeypatch.delenv("TRIALBOX_TEST_HOST_VALUE", raising=False)
    task = make_task("unset-var", task_toml=CONTEXT_TOML, solve_sh=SOLVE)

    result = await run_trial(task, "oracle", config=config, job_id=container_watch.job_id)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "materialize")
    assert "verifier.env" in result.error.message
    assert "TRIALBOX_TEST_HOST_VALUE" in result.error.message
    assert container_watch.created() == []


async def test_a_host_value_never_lands_in_a_result_or_a_collected_file(
    config: TrialConfig, make_task, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-host-" + os.urandom(8).hex()
    monkeypatch.setenv("TRIALBOX_TEST_HOST_VALUE", secret)
    task = make_task(
        "host-secret",
        task_toml='[environment]\nenv = { KEY = "${TRIALBOX_TEST_HOST_VALUE}" }\n',
        test_sh='#!/bin/sh\necho "key=$KEY"\necho 1 > /logs/verifier/reward.txt\n',
    )

    result = await run_trial(task, 'command:echo "agent key=$KEY"', config=config)

    assert result.reward == 1.0
    trial_dir = Path(result.trial_dir)
    assert (trial_dir / "logs/agent/stdout.txt").read_text() == "agent key=[redacted]\n"
    for path in (p for p in trial_dir.rglob("*") if p.is_file()):
        assert secret.encode() not in path.read_bytes(), f"{path} holds the host's value"


READY_LATER = f"""\
FROM {BASE_IMAGE}
RUN printf '%s\\n' '#!/bin/sh' '(sleep 2; touch /tmp/ready) &' 'exec "$@"' > /entry.sh \\
    && chmod 0755 /entry.sh
ENTRYPOINT ["/entry.sh"]
"""


async def test_the_agent_starts_only_once_the_task_s_healthcheck_passes(
    config: TrialConfig, make_task
) -> None:
    toml = (
        "[environment.healthcheck]\n"
        'command = "test -f /tmp/ready"\n'
        "start_period_sec = 10\nstart_interval_sec = 0.5\ninterval_sec = 0.5\nretries = 2\n"
    )
    task = make_task("ready-later", dockerfile=READY_LATER, task_toml=toml)

    result = await run_trial(task, "command:test -f /tmp/ready", config=config)

    assert result.error is None, result.error
    assert result.agent.exit_code == 0  # the file was there when the agent started
    assert result.timings.start >= 1.5


async def test_a_healthcheck_that_keeps_failing_is_the_task_s_and_the_agent_never_runs(
    config: TrialConfig, make_task
) -> None:
    toml = (
        "[environment.healthcheck]\n"
        'command = "echo not yet; exit 3"\ninterval_sec = 0.2\nretries = 2\n'
    )
    task = make_task("never-ready", task_toml=toml)

    result = await run_trial(task, "command:touch /logs/agent/ran", config=config)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "start")
    assert "environment.healthcheck" in result.error.message
    assert "failed 2 times in a row" in result.error.message
    assert "not yet" in result.error.message
    assert result.agent.termination is None
    assert not (Path(result.trial_dir) / "logs/agent/ran").exists()


async def test_the_image_s_own_healthcheck_is_waited_for(config: TrialConfig, make_task) -> None:
    dockerfile = (
        f"FROM {BASE_IMAGE}\n"
        "HEALTHCHECK --interval=1s --timeout=2s --retries=1 CMD test -f /nothing-here\n"
    )
    task = make_task("image-health", dockerfile=dockerfile)

    result = await run_trial(task, "nop", config=config)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "start")
    assert "the HEALTHCHECK of image" in result.error.message


INTERFACES = (
    "#!/bin/sh\n"
    "ls /sys/class/net > /logs/verifier/interfaces.txt\n"
    "echo 1 > /logs/verifier/reward.txt\n"
)


def _interfaces(result) -> set[str]:
    text = (Path(result.trial_dir) / "logs/verifier/interfaces.txt").read_text()
    return set(text.split()) - {"lo"}


async def test_a_task_gets_a_network_by_default_as_in_harbor(
    config: TrialConfig, make_task
) -> None:
    task = make_task("networked", test_sh=INTERFACES)

    result = await run_trial(task, "nop", config=config)

    assert result.reward == 1.0
    assert _interfaces(result) != set()


async def test_no_internet_takes_the_network_away_from_every_task(
    config: TrialConfig, make_task
) -> None:
    task = make_task(
        "asks-public", test_sh=INTERFACES, task_toml='[environment]\nnetwork_mode = "public"\n'
    )

    result = await run_trial(task, "nop", config=config.model_copy(update={"no_internet": True}))

    assert result.reward == 1.0
    assert _interfaces(result) == set()


async def test_no_network_means_none(config: TrialConfig, make_task) -> None:
    task = make_task(
        "no-network", test_sh=INTERFACES, task_toml='[environment]\nnetwork_mode = "no-network"\n'
    )

    result = await run_trial(task, "nop", config=config)

    assert _interfaces(result) == set()


async def test_more_cpus_than_the_host_has_is_refused_or_clipped(
    config: TrialConfig, make_task, container_watch
) -> None:
    task = make_task("greedy", task_toml="[environment]\ncpus = 4096\n")

    refused = await run_trial(task, "nop", config=config, job_id=container_watch.job_id)

    assert refused.error is not None
    assert (refused.error.category, refused.error.phase) == ("validation", "materialize")
    assert "environment.cpus = 4096" in refused.error.message
    assert "--clip-resources" in refused.error.message
    assert container_watch.created() == []

    clipped = await run_trial(
        task, "nop", config=config.model_copy(update={"clip_resources": True})
    )

    assert clipped.reward == 1.0
    assert any("clipped to the host's" in w for w in clipped.warnings)


async def test_a_dockerfile_that_needs_buildkit_is_the_task_s_and_says_how_to_fix_it(
    config: TrialConfig, make_task
) -> None:
    dockerfile = f"FROM {BASE_IMAGE}\nCOPY --chmod=0755 run.sh /run.sh\n"
    task = make_task("buildkit-only", dockerfile=dockerfile)
    (task / "environment" / "run.sh").write_text("#!/bin/sh\n")

    result = await run_trial(task, "nop", config=config)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "image")
    assert "COPY --chmod with COPY and RUN chmod" in result.error.message


@pytest.mark.parametrize("field", ["agent", "verifier"])
async def test_a_user_the_image_does_not_have_is_the_task_s_before_the_agent_runs(
    config: TrialConfig, make_task, field: str
) -> None:
    task = make_task(f"no-{field}-user", task_toml=f'[{field}]\nuser = "nobody-here"\n')

    result = await run_trial(task, "command:touch /logs/agent/ran", config=config)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "start")
    assert f"{field}.user = 'nobody-here': the image has no such user" in result.error.message
    assert result.agent.termination is None
    assert not (Path(result.trial_dir) / "logs/agent/ran").exists()
